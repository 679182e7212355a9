package config

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update", false, "rewrite docs/CONFIG.md from the registry")

const configDocPath = "../../docs/CONFIG.md"

// docs/CONFIG.md is generated from the registry the loader uses; this test
// fails when it is stale and rewrites it with -update (go generate).
func TestConfigDocIsCurrent(t *testing.T) {
	t.Parallel()
	want := configDoc()
	if *updateDoc {
		if err := os.WriteFile(configDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("docs/CONFIG.md differs from the settings registry (internal/config/registry.go): " +
			"regenerate it with `go generate ./internal/config`")
	}
}

// configDoc renders docs/CONFIG.md.
func configDoc() string {
	var c Config
	c = Default()
	fs := flag.NewFlagSet("doc", flag.ContinueOnError)
	sections := c.sections()
	var b strings.Builder
	b.WriteString(configDocIntro)
	var toc []string
	for _, sec := range sections {
		toc = append(toc, fmt.Sprintf("[%s](#%s)", sec.name, sec.name))
	}
	fmt.Fprintf(&b, "Sections, in the order of `gateway -h`: %s.\n", strings.Join(toc, " · "))
	for _, sec := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n\n", sec.name, upperFirst(sec.title))
		b.WriteString("| YAML: flat, nested | flag | env | default | 0 / empty means | meaning |\n|---|---|---|---|---|---|\n")
		for _, s := range sec.settings {
			fs.Var(s.value, s.name, s.usage)
			fmt.Fprintf(&b, "| `%s`, `%s` | `--%s` | `%s` | %s | %s | %s |\n",
				s.yamlName(), sec.nestedKeyOf(s), s.name, s.envName(),
				docDefault(fs.Lookup(s.name)), docZero(s), docMeaning(s))
		}
	}
	return b.String()
}

func docDefault(f *flag.Flag) string {
	if computed, ok := computedDefaults[f.Name]; ok {
		return cell(computed)
	}
	if f.DefValue == "" {
		return "empty"
	}
	return "`" + f.DefValue + "`"
}

// docMeaning is the setting's fuller explanation where it has one, else
// its usage.
func docMeaning(s setting) string {
	if d, ok := settingDetails[s.name]; ok {
		return strings.ReplaceAll(d, "|", `\|`)
	}
	return cell(s.usage)
}

func docZero(s setting) string {
	if s.zero == "" {
		return "—"
	}
	return "`" + zeroWord(s.value) + "`: " + cell(s.zero)
}

// cell escapes what a Markdown table cell would otherwise read as syntax.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "*", `\*`).Replace(s)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

var configDocIntro = `# Configuration reference

<!-- Generated from internal/config/registry.go by ` + "`go generate ./internal/config`" + `. Do not edit: edit the registry. -->

The gateway reads flags, then ` + "`SANDGATE_*`" + ` environment variables, then the YAML file named by
` + "`--config`" + ` or ` + "`SANDGATE_CONFIG`" + `, then the defaults (the first that gives a setting wins).
Every setting has all three names, derived from one registry entry: flag ` + "`--idle-timeout`" + `,
env ` + "`SANDGATE_IDLE_TIMEOUT`" + `, YAML ` + "`idle_timeout`" + `. In the YAML file a setting may also be
written nested in its section's block, and the two forms mix freely:

` + "```yaml" + `
listen: 0.0.0.0:8080        # flat
pool:                       # nested: pool.idle_timeout is idle_timeout
  idle_timeout: 10m
  max_sandboxes: 20
egress:
  mode: proxy               # the egress setting
  allow: [pypi.org, files.pythonhosted.org]
` + "```" + `

- A setting given twice in one file (flat and nested, or DeerFlow's ` + "`sandbox:`" + ` key and ours) is an
  error naming both spellings; neither silently wins. A flag or variable still overrides the file.
- A key no setting has is logged as a warning naming it (` + "`pool.x: not used by this gateway, ignored`" + `)
  and the gateway starts anyway, as it always has. Nesting that joins to a flat name with ` + "`_`" + `
  (` + "`kubernetes: {node_host: ...}`" + `, ` + "`auth: {jwt: {issuer: ...}}`" + `) still works.
- Durations take Go syntax (` + "`90s`" + `, ` + "`10m`" + `) or a bare number of seconds; sizes ` + "`512m`" + `, ` + "`2g`" + `;
  lists are comma separated or a YAML list; maps ` + "`key=value,...`" + ` or a YAML map.
- Each setting has one meaning of 0 (numbers, durations, sizes) or empty (strings, lists), in the
  column "0 / empty means"; "refused" means start-up fails naming the setting. Where the default is
  worked out at start-up, the default column says how.
- The YAML-only keys (` + "`mounts`" + `, ` + "`environment`" + `, ` + "`labels`" + `, ` + "`templates`" + `) and DeerFlow's ` + "`sandbox:`" + ` block are in
  the [README](../README.md#configuration).
- ` + "`gateway -h`" + ` prints the same sections in the same order, each with its settings in the order
  of its table below.

`

// Every fuller explanation belongs to a setting.
func TestSettingDetailsNameSettings(t *testing.T) {
	t.Parallel()
	var c Config
	names := map[string]bool{}
	for _, s := range c.settings() {
		names[s.name] = true
	}
	for name := range settingDetails {
		if !names[name] {
			t.Errorf("settingDetails has %s, which is no setting", name)
		}
	}
}

// The default shown (by -h and docs/CONFIG.md) is what passing it gives:
// where a stored zero means something else than a given 0, the default is
// described in computedDefaults instead.
func TestShownDefaultIsTheDefault(t *testing.T) {
	t.Parallel()
	// Docker reads a DiskLimit of 0 as none, as the -1 a given 0 stores.
	storedZeroIsOff := map[string]bool{"docker-disk-limit": true}
	shown := Default()
	for _, s := range shown.settings() {
		if _, ok := computedDefaults[s.name]; ok || storedZeroIsOff[s.name] {
			continue
		}
		got := Default()
		var set flag.Value
		for _, g := range got.settings() {
			if g.name == s.name {
				set = g.value
			}
		}
		if err := set.Set(s.value.String()); err != nil {
			t.Errorf("-%s: its default %q does not parse: %v", s.name, s.value.String(), err)
			continue
		}
		got.imageSet, got.perUserSet = false, shown.perUserSet
		// %v: a nil map and an empty one mean the same here.
		if fmt.Sprintf("%v", got) != fmt.Sprintf("%v", Default()) {
			t.Errorf("-%s %s is not the default it is shown as", s.name, strconv.Quote(s.value.String()))
		}
	}
}
