package config

import (
	"bytes"
	"errors"
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
