package config

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Every setting has one flat and one nested YAML name, none shared, and no
// section block shadows a key the file already gives another meaning.
func TestYAMLNamesAreDistinct(t *testing.T) {
	t.Parallel()
	var c Config
	sections := c.sections()
	keys := newYAMLKeys(sections)
	names := map[string]string{}
	claim := func(name, by string) {
		if other, ok := names[name]; ok {
			t.Errorf("YAML name %s is both %s and %s", name, other, by)
		}
		names[name] = by
	}
	for _, sec := range sections {
		if sec.name == "sandbox" || slices.Contains(structuredKeys, sec.name) {
			t.Errorf("section %s shadows a YAML-only key or DeerFlow's block", sec.name)
		}
		if s, ok := keys.flat[sec.name]; ok && !slices.Contains(sec.settings, s) {
			t.Errorf("section %s is the flat name of a setting of another section", sec.name)
		}
		for _, s := range sec.settings {
			claim(s.yamlName(), s.name)
			nested := sec.nestedKeyOf(s)
			claim(nested, s.name)
			if got, ok := keys.lookup(nested); !ok || got.name != s.name {
				t.Errorf("%s does not resolve to -%s", nested, s.name)
			}
		}
	}
	if len(keys.flat) != len(c.settings()) {
		t.Errorf("%d flat names for %d settings", len(keys.flat), len(c.settings()))
	}
}

// The nested form sets what the flat form sets, in every section.
func TestNestedYAMLSetsWhatFlatSets(t *testing.T) {
	t.Parallel()
	const jwtSecret = "0123456789abcdef0123456789abcdef"
	const jwtFlat = "auth_jwt_hs256_secret: " + jwtSecret + "\nauth_jwt_audience: sandgate\n"
	for _, tc := range []struct{ flat, nested string }{
		{"listen: 127.0.0.1:9000\n", "server:\n  listen: 127.0.0.1:9000\n"},
		{jwtFlat, "auth:\n  jwt_hs256_secret: " + jwtSecret + "\n  jwt_audience: sandgate\n"},
		{jwtFlat, "auth:\n  jwt:\n    hs256_secret: " + jwtSecret + "\n    audience: sandgate\n"},
		{"data_dir: /srv/sandgate\nthread_data_quota: 10g\n", "storage:\n  data_dir: /srv/sandgate\n  thread_data_quota: 10g\n"},
		{"redis_url: redis://r:6379/0\nredis_buckets: 128\n", "redis:\n  url: redis://r:6379/0\n  buckets: 128\n"},
		{"idle_timeout: 5m\nmax_sandboxes: 0\ncap_mode: hard\n", "pool:\n  idle_timeout: 5m\n  max_sandboxes: 0\n  cap_mode: hard\n"},
		{"create_rate: 10/1m\nmax_requests_per_user: 0\n", "limits:\n  create_rate: 10/1m\n  max_requests_per_user: 0\n"},
		{"ws_idle_timeout: 0\nmax_body_bytes: 2g\n", "proxy:\n  ws_idle_timeout: 0\n  max_body_bytes: 2g\n"},
		{"egress: open\negress_allow: [a.example, b.example]\n", "egress:\n  mode: open\n  allow: [a.example, b.example]\n"},
		{"checkpoint_keep: 0\ncheckpoint_method: copy\n", "checkpoints:\n  keep: 0\n  method: copy\n"},
		{"process_memory: 1g\n", "process:\n  memory: 1g\n"},
		{"image: x:1\ndocker_memory: 0\n", "docker:\n  image: x:1\n  memory: 0\n"},
		{"kubernetes_node_selector: {pool: sb}\nkubernetes_namespace: ns\n", "kubernetes:\n  node_selector: {pool: sb}\n  namespace: ns\n"},
		{"provisioner_url: http://p:8002\n", "remote:\n  url: http://p:8002\n"},
		{"log_format: json\nlog_level: debug\n", "log:\n  format: json\n  level: debug\n"},
	} {
		t.Run(strings.SplitN(tc.nested, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			flat, fw, ferr := loadWith(t, nil, nil, tc.flat)
			nested, nw, nerr := loadWith(t, nil, nil, tc.nested)
			if ferr != nil || nerr != nil || len(fw)+len(nw) != 0 {
				t.Fatalf("flat: %v %v; nested: %v %v", ferr, fw, nerr, nw)
			}
			if fmt.Sprintf("%v", flat) != fmt.Sprintf("%v", nested) {
				t.Errorf("%q and %q load differently", tc.flat, tc.nested)
			}
			if fmt.Sprintf("%v", flat) == fmt.Sprintf("%v", Default()) {
				t.Errorf("%q set nothing", tc.flat)
			}
		})
	}
}

// One setting given twice in a file is an error naming both spellings.
func TestYAMLSettingGivenTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml      string
		spellings [2]string
	}{
		{yaml: "idle_timeout: 5m\npool:\n  idle_timeout: 6m\n", spellings: [2]string{"idle_timeout", "pool.idle_timeout"}},
		{yaml: "kubernetes_node_host: a\nkubernetes:\n  node_host: b\n", spellings: [2]string{"kubernetes.node_host", "kubernetes_node_host"}},
		{yaml: "sandbox:\n  image: a:1\ndocker:\n  image: b:1\n", spellings: [2]string{"docker.image", "sandbox.image"}},
		{yaml: "sandbox:\n  replicas: 3\nmax_sandboxes: 4\n", spellings: [2]string{"max_sandboxes", "sandbox.replicas"}},
		{yaml: "sandbox:\n  mounts: []\nmounts: []\n", spellings: [2]string{"mounts", "sandbox.mounts"}},
	} {
		_, _, err := loadWith(t, nil, nil, tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.spellings[0]+" and "+tc.spellings[1]) || !strings.Contains(err.Error(), "give it once") {
			t.Errorf("%q: error %v does not name %s and %s", tc.yaml, err, tc.spellings[0], tc.spellings[1])
		}
	}
	// A flag over the file is precedence, not a conflict.
	if c, _, err := loadWith(t, []string{"--idle-timeout", "7m"}, nil, "pool:\n  idle_timeout: 6m\n"); err != nil || c.Pool.IdleTimeout.String() != "7m0s" {
		t.Errorf("flag over nested yaml: %v %v", err, c.Pool.IdleTimeout)
	}
}

// A key no setting has is a warning naming it as written, as it was
// before sections; the gateway still starts.
func TestUnknownYAMLKeysAreNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, warning string }{
		{"pool:\n  idle_timout: 5m\n", "pool.idle_timout: not used by this gateway, ignored"},
		{"nosuch:\n  key: 1\n", "nosuch.key: not used by this gateway, ignored"},
		{"nosuch_key: 1\n", "nosuch_key: not used by this gateway, ignored"},
		{"egress:\n  allow: [a.example]\n  nope: 1\n", "egress.nope: not used by this gateway, ignored"},
		{"sandbox:\n  base_port: 1\n", "sandbox.base_port ignored"},
	} {
		_, warnings, err := loadWith(t, nil, nil, tc.yaml)
		if err != nil || len(warnings) != 1 || !strings.HasPrefix(warnings[0], tc.warning) {
			t.Errorf("%q: %v %v, want one warning %q", tc.yaml, err, warnings, tc.warning)
		}
	}
}

// -h prints each section's header, in the registry's order, and every
// setting once, under its own section.
func TestHelpGroupsBySection(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if _, _, err := Load([]string{"-h"}, envOf(nil), &out); !IsHelp(err) {
		t.Fatalf("-h: %v", err)
	}
	lines := strings.Split(out.String(), "\n")
	var c Config
	at := 0
	for _, sec := range c.sections() {
		header := fmt.Sprintf("[%s] %s", sec.name, sec.title)
		i := slices.Index(lines[at:], header)
		if i < 0 {
			t.Fatalf("-h lacks header %q after line %d", header, at)
		}
		at += i
		for _, s := range sec.settings {
			prefix := "  -" + s.name
			var seen []int
			for j, l := range lines {
				if l == prefix || strings.HasPrefix(l, prefix+" ") {
					seen = append(seen, j)
				}
			}
			if len(seen) != 1 || seen[0] <= at {
				t.Errorf("-%s: at lines %v, want once under [%s] (line %d)", s.name, seen, sec.name, at)
			}
		}
	}
}

// What 0 or empty means is written, once, for every setting that is not
// a boolean.
func TestEverySettingSaysWhatZeroMeans(t *testing.T) {
	t.Parallel()
	var c Config
	for _, s := range c.settings() {
		_, isBool := s.value.(*boolValue)
		if isBool != (s.zero == "") {
			t.Errorf("-%s: zero %q (a boolean has none, every other setting one)", s.name, s.zero)
		}
		if strings.Contains(s.usage, "0 =") || strings.Contains(s.usage, "empty =") {
			t.Errorf("-%s: the usage says what zero means besides the zero field: %q", s.name, s.usage)
		}
	}
}
