package config

import (
	"strings"
	"testing"
	"time"
)

// The YAML `templates:` list becomes the pool's templates: sizes parsed,
// $VAR expanded, the default checked; every mistake names its template and
// field at start-up.
func TestTemplatesConfig(t *testing.T) {
	t.Parallel()
	c, _, err := loadWith(t, nil, map[string]string{"PIP_TOKEN": "s3cret"}, `
templates:
  - name: python
    image: sandgate-sandbox-python:1
    env: {PIP_INDEX_TOKEN: $PIP_TOKEN}
    memory: 1g
    max_memory: 2GiB
    egress: {mode: proxy, allow: [pypi.org]}
    prewarm: 2
    idle_timeout: 30m
    freeze_after: 2m
  - name: minimal
    idle_timeout: never
    freeze_after: never
default_template: python
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pool.Templates) != 2 || c.Pool.DefaultTemplate != "python" {
		t.Fatalf("templates %+v default %q", c.Pool.Templates, c.Pool.DefaultTemplate)
	}
	py := c.Pool.Templates[0]
	if py.Backend.Name != "python" || py.Backend.Image != "sandgate-sandbox-python:1" || py.Backend.Memory != 1<<30 ||
		py.MaxMemory != 2<<30 || py.Prewarm != 2 || py.Env["PIP_INDEX_TOKEN"] != "s3cret" || py.Egress == nil || py.Egress.Allow[0] != "pypi.org" {
		t.Fatalf("python template %+v", py)
	}
	if py.IdleTimeout != 30*time.Minute || c.Pool.Templates[1].IdleTimeout >= 0 {
		t.Fatalf("idle timeouts %s and %s, want 30m and never", py.IdleTimeout, c.Pool.Templates[1].IdleTimeout)
	}
	// The fleet freezes nothing; a template's delay stands on its own.
	if py.FreezeAfter != 2*time.Minute || c.Pool.Templates[1].FreezeAfter >= 0 || c.Pool.FreezeAfter != 0 {
		t.Fatalf("freeze delays %s and %s (fleet %s), want 2m, never and none", py.FreezeAfter, c.Pool.Templates[1].FreezeAfter, c.Pool.FreezeAfter)
	}
	// The image store's grace: 1h by default, 0 turns collection off.
	if c.Process.ImageGCGrace != time.Hour {
		t.Fatalf("process_image_gc_grace %s, want the 1h default", c.Process.ImageGCGrace)
	}
	if off, _, err := loadWith(t, nil, nil, "process_image_gc_grace: 0\n"); err != nil || off.Process.ImageGCGrace >= 0 {
		t.Fatalf("process_image_gc_grace 0: %s (%v), want never", off.Process.ImageGCGrace, err)
	}
	if src := c.TemplateSources(); len(src) != 1 || src["python"].Image == "" {
		t.Fatalf("sources %v: only python has an image", src)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad size", "templates:\n  - {name: a, memory: lots}\n", "templates: a: memory"},
		{"bad idle timeout", "templates:\n  - {name: a, idle_timeout: soon}\n", "idle_timeout"},
		{"idle timeout under touch_interval", "templates:\n  - {name: a, idle_timeout: 1s}\n", "touch_interval"},
		{"bad freeze_after", "templates:\n  - {name: a, freeze_after: later}\n", "templates: a: freeze_after"},
		{"freeze_after under the cache", "cache_ttl: 5s\ntemplates:\n  - {name: a, freeze_after: 5s}\n", "templates: a: freeze_after 5s must exceed cache_ttl + touch_interval"},
		{"freeze_after past its idle_timeout", "templates:\n  - {name: a, idle_timeout: 5m, freeze_after: 5m}\n", "templates: a: freeze_after 5m0s must be shorter than idle_timeout (5m0s)"},
		{"freeze_after past the fleet's idle_timeout", "idle_timeout: 5m\ntemplates:\n  - {name: a, freeze_after: 10m}\n", "templates: a: freeze_after 10m0s must be shorter than idle_timeout (5m0s)"},
		{"fleet freeze_after past its idle_timeout", "idle_timeout: 1h\nfreeze_after: 10m\ntemplates:\n  - {name: a, idle_timeout: 5m}\n", "templates: a: freeze_after 10m0s must be shorter than idle_timeout (5m0s)"},
		{"memory over max", "templates:\n  - {name: a, memory: 2g, max_memory: 1g}\n", "max_memory"},
		{"bad name", "templates:\n  - {name: A_B}\n", "template name"},
		{"twice", "templates:\n  - {name: a}\n  - {name: a}\n", "configured twice"},
		{"unknown default", "templates:\n  - {name: a}\ndefault_template: b\n", "default_template"},
		{"bad egress", "templates:\n  - {name: a, egress: {mode: wide}}\n", "egress"},
		{"unknown key", "templates:\n  - {name: a, imgae: x}\n", "imgae"},
		{"image without a jail", "backend: process\nprocess_isolation: none\ntemplates:\n  - {name: a, rootfs: /srv/a.tar}\n", "process_isolation"},
	} {
		_, _, err := loadWith(t, nil, nil, tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
