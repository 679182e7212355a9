package config

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestHelpShowsEveryDefault(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, _, err := Load([]string{"-h"}, envOf(nil), &out)
	if !IsHelp(err) {
		t.Fatalf("-h: %v", err)
	}
	usage := out.String()
	var c Config
	names := []string{"config"}
	for _, s := range c.settings() {
		names = append(names, s.name)
	}
	lines := strings.Split(usage, "\n")
	for _, name := range names {
		i := -1
		for j, l := range lines {
			if l == "  -"+name || strings.HasPrefix(l, "  -"+name+" ") {
				i = j
			}
		}
		if i < 0 || i+1 >= len(lines) || !strings.Contains(lines[i+1], "(default ") {
			t.Errorf("-h shows no default for -%s", name)
		}
	}
	for _, want := range []string{
		"(default 30s)",    // reconcile-interval: pool's 0 means 30s
		`(default "soft")`, // cap-mode
		`(default "sandgate:{default}:")`,
		"(default 2g)", // process-memory: jail's default
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("-h lacks %s", want)
		}
	}
}

func TestBadFlagIsOneLineWithoutUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-idle-timeout", "x"}, `invalid value "x" for flag -idle-timeout: "x" is not a duration`},
		{[]string{"-cap-mode=medium"}, `invalid value "medium" for flag -cap-mode: "medium" is not soft or hard`},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		// A bad choice is a bad value too (exit 2), not a start-up failure.
		{[]string{"--backend", "dokcer"}, `invalid value "dokcer" for flag -backend: "dokcer" is not process, docker, kubernetes, remote, applecontainer or auto`},
		{[]string{"--process-isolation=chroot"}, `invalid value "chroot" for flag -process-isolation: "chroot" is not namespaces or none`},
		{[]string{"--log-level", "loud"}, `invalid value "loud" for flag -log-level`},
		{[]string{"--server-impl", "nginx"}, `invalid value "nginx" for flag -server-impl`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var out bytes.Buffer
		_, _, err := Load(c.args, envOf(nil), &out)
		var usage *UsageError
		if !errors.As(err, &usage) {
			t.Errorf("%v: %v is not a UsageError", c.args, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %q, want one line starting %q", c.args, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed %d bytes of usage besides the error", c.args, out.Len())
		}
	}
}

// TestHelpDefaultsAreTheConfigs: every flag's "(default X)" in -h is the
// configuration's own default: Default()'s value, or where that is the
// zero, what the registry says the zero means (issue 40, point 10: -h
// showed "" for egress and process-isolation, whose empty means proxy and
// namespaces).
func TestHelpDefaultsAreTheConfigs(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if _, _, err := Load([]string{"-h"}, envOf(nil), &out); !IsHelp(err) {
		t.Fatalf("-h: %v", err)
	}
	shown := map[string]string{}
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  -") || i+1 == len(lines) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "  -"), " ")
		usage := lines[i+1]
		j := strings.LastIndex(usage, " (default ")
		if j < 0 || !strings.HasSuffix(usage, ")") {
			t.Errorf("-%s: no default in %q", name, usage)
			continue
		}
		shown[name] = usage[j+len(" (default ") : len(usage)-1]
	}
	def := Default()
	for _, s := range def.settings() {
		got, ok := shown[s.name]
		if !ok {
			t.Errorf("-h lists no -%s", s.name)
			continue
		}
		value := s.value.String() // the default config's own value
		var want string
		switch computed, isComputed := computedDefaults[s.name]; {
		case isComputed:
			want = computed
		case isZero(s.value, value) && s.zero != "":
			want = s.zero
		case kindOf(s.value) == "string" || value == "":
			want = strconv.Quote(value)
		default:
			want = value
		}
		if got != want {
			t.Errorf("-%s: -h shows default %s, the config's is %s", s.name, got, want)
		}
		if got == `""` && s.zero != "" {
			t.Errorf("-%s: -h shows an empty default where empty means %q", s.name, s.zero)
		}
	}
	for name, want := range map[string]string{"egress": "proxy", "process-isolation": "namespaces", "redis-buckets": "64",
		"backend": `"process"`, "cap-mode": `"soft"`} {
		if shown[name] != want {
			t.Errorf("-%s: default %s, want %s", name, shown[name], want)
		}
	}
}
