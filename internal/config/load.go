package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
)

// EnvPrefix starts every environment variable name.
const EnvPrefix = "SANDGATE_"

// ConfigEnv names the YAML file.
const ConfigEnv = "SANDGATE_CONFIG"

// Load builds the configuration: defaults, then the YAML file, then
// SANDGATE_* variables, then flags. Warnings are for keys that were ignored.
func Load(args []string, lookupEnv func(string) (string, bool), usage io.Writer) (Config, []string, error) {
	c := Default()
	fs := flag.NewFlagSet("gateway serve", flag.ContinueOnError)
	// The flag package would print a bad flag's error and then the whole
	// usage; the caller prints the error once, with a hint (UsageError).
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	sections := c.sections()
	var settings []setting
	for _, sec := range sections {
		for _, s := range sec.settings {
			fs.Var(s.value, s.name, s.usage)
			settings = append(settings, s)
		}
	}
	configPath := fs.String("config", "", "YAML config file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usage, fs, sections)
			return c, nil, err
		}
		return c, nil, &UsageError{err}
	}
	if fs.NArg() > 0 {
		return c, nil, &UsageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	fromFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fromFlag[f.Name] = true })

	var warnings []string
	path := *configPath
	if path == "" {
		path, _ = lookupEnv(ConfigEnv)
	}
	if path != "" {
		w, err := c.applyYAML(path, sections, fromFlag, lookupEnv)
		if err != nil {
			return c, nil, err
		}
		warnings = w
	}
	for _, s := range settings {
		if v, ok := lookupEnv(s.envName()); ok && !fromFlag[s.name] {
			if err := s.value.Set(v); err != nil {
				return c, nil, fmt.Errorf("%s: %w", s.envName(), err)
			}
		}
	}
	c.Pool.Mounts.DataDir = c.DataDir
	c.multiUserDefaults()
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	return c, warnings, nil
}

// IsHelp reports whether err is a request for usage.
func IsHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// UsageError is a bad command line (an unknown flag, a bad value): the
// caller prints it with UsageHint and exits 2, as the flag package would.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// UsageHint follows a UsageError.
const UsageHint = "run 'gateway -h' for usage"

// printUsage lists the flags section by section, in the registry's order,
// each with its default (shownDefault) and what 0 or empty means.
func printUsage(w io.Writer, fs *flag.FlagSet, sections []section) {
	fmt.Fprintf(w, "Usage: gateway [serve] [flags]\n\n"+
		"Every flag is also an environment variable (SANDGATE_NAME) and a key of the YAML file,\n"+
		"flat (name) or nested in its section's block (section: {name}); docs/CONFIG.md lists them all.\n\n")
	cfg := fs.Lookup("config")
	fmt.Fprintf(w, "  -config string\n    \t%s (env %s) (default %q)\n", cfg.Usage, ConfigEnv, cfg.DefValue)
	for _, sec := range sections {
		fmt.Fprintf(w, "\n[%s] %s\n", sec.name, sec.title)
		for _, s := range sec.settings {
			printFlag(w, fs.Lookup(s.name), s, " (env "+s.envName()+") (YAML "+sec.nestedKeyOf(s)+")")
		}
	}
}

// printFlag prints f as the flag package would, its usage followed by what
// its zero means, note and its default.
func printFlag(w io.Writer, f *flag.Flag, s setting, note string) {
	def, fromZero := shownDefault(f, s)
	if !fromZero {
		note = zeroNote(s) + note
	}
	name := f.Name
	if kind := kindOf(f.Value); kind != "" {
		name += " " + kind
	}
	fmt.Fprintf(w, "  -%s\n    \t%s%s (default %s)\n", name, f.Usage, note, def)
}

// shownDefault is the default -h shows, from the one source the config
// has: Default()'s value, or where that is the kind's zero, what the
// registry says the zero means (egress "" is proxy, redis-buckets 0 is 64),
// or the default worked out at start-up. fromZero: it is the zero's
// meaning, which the "(empty = ...)" note would repeat.
func shownDefault(f *flag.Flag, s setting) (def string, fromZero bool) {
	if computed, ok := computedDefaults[f.Name]; ok {
		return computed, false
	}
	if isZero(f.Value, f.DefValue) && s.zero != "" {
		return s.zero, true
	}
	if kindOf(f.Value) == "string" || f.DefValue == "" {
		return strconv.Quote(f.DefValue), false
	}
	return f.DefValue, false
}

// isZero reports whether def, the String of a flag's default, is the zero
// of its kind.
func isZero(v flag.Value, def string) bool {
	switch kindOf(v) {
	case "duration":
		return def == "0s" || def == "0"
	case "int", "size", "cpus":
		return def == "0"
	}
	return def == ""
}

// zeroNote is " (0 = never)" or " (empty = off)": what the zero of s means.
func zeroNote(s setting) string {
	if s.zero == "" {
		return ""
	}
	return " (" + zeroWord(s.value) + " = " + s.zero + ")"
}

// zeroWord is how the zero of a setting's kind is written.
func zeroWord(v flag.Value) string {
	switch kindOf(v) {
	case "duration", "int", "size", "cpus", "N/duration":
		return "0"
	}
	return "empty"
}

// kindOf names what a flag takes, for the usage.
func kindOf(v flag.Value) string {
	switch v.(type) {
	case *boolValue:
		return ""
	case *durationValue, *offDuration:
		return "duration"
	case *intValue, *offInt, *setInt:
		return "int"
	case *offBytes:
		return "size"
	case *offCPUs:
		return "cpus"
	case *listValue, *apiKeysValue, *tolerationsValue:
		return "list"
	case *mapValue:
		return "key=value,..."
	case *rateValue:
		return "N/duration"
	}
	return "string"
}
