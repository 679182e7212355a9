package docker

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// One backend on the real engine, two sandboxes: the one made from a
// template runs the template's image (its marker file, its reference in
// the container) under the template's memory limit; the other the
// configured image and limit. List and another backend's Discover see the
// template's label. A template image the engine lacks fails its create
// with an image error naming it (pull policy never).
func TestTemplateImageAndMemory(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const configured, templated = 512 << 20, 128 << 20
	const marker = "/usr/share/sandgate/template-marker"
	tag := buildDerived(t, h, `RUN ["/bin/busybox", "sh", "-c", "mkdir -p /usr/share/sandgate && echo marked-image > `+marker+`"]`)
	d := h.backend(func(c *Config) { c.Memory = configured })
	mc := backend.MountConfig{DataDir: t.TempDir()}
	marked := backendtest.Spec(t, mc, "tom", "marked")
	marked.Template = backend.Template{Name: "marked", Image: tag, Memory: templated}
	plain := backendtest.Spec(t, mc, "tom", "plain")

	for _, tc := range []struct {
		spec     backend.Spec
		image    string
		memory   int64
		template string
		cat      string // the marker's content, "" = absent
	}{
		{marked, tag, templated, "marked", "marked-image"},
		{plain, h.image, configured, "", ""},
	} {
		info := backendtest.MustCreate(t, d, tc.spec)
		c := h.inspect(info.Incarnation)
		if c.Config.Image != tc.image || c.HostConfig.Memory != tc.memory {
			t.Errorf("sandbox %s: container image %s, memory %d; want %s, %d", tc.spec.Thread, c.Config.Image, c.HostConfig.Memory, tc.image, tc.memory)
		}
		if got := c.Config.Labels[backend.LabelTemplate]; got != tc.template || info.Labels[backend.LabelTemplate] != tc.template {
			t.Errorf("sandbox %s: template label %q on the container, %q in Info; want %q", tc.spec.Thread, got, info.Labels[backend.LabelTemplate], tc.template)
		}
		res := backendtest.Exec(t, info, "cat "+marker)
		if got := strings.TrimSpace(res.Output); (res.ExitCode == 0) != (tc.cat != "") || res.ExitCode == 0 && got != tc.cat {
			t.Errorf("sandbox %s: cat %s = exit %d, %q; want %q", tc.spec.Thread, marker, res.ExitCode, got, tc.cat)
		}
	}

	infos, err := d.List(backendtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]string{}
	for _, info := range infos {
		templates[info.Thread] = info.Labels[backend.LabelTemplate]
	}
	if len(templates) != 2 || templates["marked"] != "marked" || templates["plain"] != "" {
		t.Errorf("List: templates by thread %v, want marked: marked, plain: none", templates)
	}
	info, ok, err := h.backend().Discover(backendtest.Ctx(t), marked.SandboxID)
	if err != nil || !ok || info.Labels[backend.LabelTemplate] != "marked" {
		t.Errorf("another backend's Discover = %v, %v, labels %v; want the marked sandbox", ok, err, info.Labels)
	}

	absent := backendtest.Spec(t, mc, "tom", "absent")
	absent.Template = backend.Template{Name: "absent", Image: "sandgate-test-absent:" + randHex(6)}
	_, err = d.Create(backendtest.Ctx(t), absent)
	var missing *backend.ImageError
	if !errors.As(err, &missing) || missing.Image != absent.Template.Image {
		t.Errorf("Create with a missing template image = %v, want an image error naming %s", err, absent.Template.Image)
	}
}

// Templates pull images of their own, at once: a create waiting for one
// image's pull hears that pull's progress only, and nothing once it
// stopped waiting.
func TestPullWatchersPerImage(t *testing.T) {
	t.Parallel()
	var w pullWatchers
	got := map[string][]int64{}
	watch := func(name, ref string) func() {
		return w.add(ref, func(p backend.Progress) { got[name] = append(got[name], p.Bytes) })
	}
	watch("a1", "python:3")
	watch("a2", "python:3")
	stopB := watch("b", "node:22")
	w.report("python:3", backend.Progress{Bytes: 1})
	w.report("node:22", backend.Progress{Bytes: 2})
	stopB()
	w.report("node:22", backend.Progress{Bytes: 3})
	want := map[string][]int64{"a1": {1}, "a2": {1}, "b": {2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("progress by watcher = %v, want %v", got, want)
	}
}

// The start-up check covers the templates' images: a missing one is named
// at start, not first at a thread's create; present ones and the
// configured image say nothing.
func TestCheckImageCoversTemplates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend()
	missing := "sandgate-test-missing-template:" + randHex(4)
	d.CheckImage(t.Context(), h.image, "", missing, missing)
	logs := h.logs.String()
	if n := strings.Count(logs, "sandbox image missing"); n != 1 || !strings.Contains(logs, missing) {
		t.Fatalf("want one missing-image error naming %s, got %d:\n%s", missing, n, logs)
	}
}
