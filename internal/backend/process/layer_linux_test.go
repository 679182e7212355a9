package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/testutil"
	"github.com/sandgate/sandgate/internal/usage"
)

// measure is the thread's data as the quota code sees it, freshly walked.
func measure(t *testing.T, dataDir, user, thread string, quota int64) usage.Usage {
	t.Helper()
	u, err := usage.New(usage.Config{DataDir: dataDir, Quota: quota}).Measure(backendtest.Ctx(t), user, thread)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A template sandbox installs into its image (a new program in /bin, an
// image program replaced, 8 MiB written): it reads the writes back, the
// shared store is unchanged, the bytes count in its thread's data (over
// a 4 MiB quota), a second sandbox of the template sees none of it, and a
// destroy takes the layer, its bytes with it: the recreated sandbox has
// the image as it was. With ReadOnlyImage the image is not writable.
func TestTemplateLayer(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (idmapped mounts)")
	img := importedSandboxImage(t)
	before := testutil.TreeSum(t, img.RootFS)
	dataDir := t.TempDir()
	p := newProcess(t, t.TempDir())
	mc := backend.MountConfig{DataDir: dataDir}
	tpl := backend.Template{Name: "busybox", RootFS: img.RootFS, RootEnv: img.Env}
	spec := backendtest.Spec(t, mc, "lu", "writer")
	spec.Template = tpl
	info := backendtest.MustCreate(t, p, spec)
	const quota = 4 << 20
	base := measure(t, dataDir, "lu", "writer", quota)

	res := backendtest.Exec(t, info, `set -e
		printf '#!/bin/sh\necho TOOL-RAN\n' >/bin/tool && chmod 755 /bin/tool && tool
		rm /bin/cat && printf '#!/bin/sh\necho MY-CAT\n' >/bin/cat && chmod 755 /bin/cat && /bin/cat
		head -c 8388608 /dev/zero >/bin/big && sync
		echo "owner $(stat -c %u /bin/busybox)"`)
	if res.ExitCode != 0 || !strings.Contains(res.Output, "TOOL-RAN\nMY-CAT\nowner 1000\n") {
		t.Fatalf("writes into the image: exit %d: %q", res.ExitCode, res.Output)
	}
	if after := testutil.TreeSum(t, img.RootFS); after != before {
		t.Errorf("the store changed on disk:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if n, ok, err := p.LayerBytes(backendtest.Ctx(t), info); err != nil || !ok || n < 8<<20 || n > 12<<20 {
		t.Errorf("LayerBytes = %d, %v, %v: want the 8 MiB written into the image and a little", n, ok, err)
	}
	grown := measure(t, dataDir, "lu", "writer", quota)
	if grown.Bytes-base.Bytes < 8<<20 || !grown.Over(quota) {
		t.Errorf("thread data %d -> %d bytes after writing 8 MiB into the image (over the %d quota: %v): the layer is not counted",
			base.Bytes, grown.Bytes, quota, grown.Over(quota))
	}

	other := backendtest.Spec(t, mc, "lu", "reader")
	other.Template = tpl
	look := `test -e /bin/tool && echo SEES-TOOL; test -e /bin/big && echo SEES-BIG; echo x | /bin/cat; echo done`
	if out := backendtest.Exec(t, backendtest.MustCreate(t, p, other), look).Output; strings.Contains(out, "SEES") ||
		!strings.Contains(out, "x\ndone\n") {
		t.Errorf("another sandbox of the template sees the first one's writes: %q", out)
	}

	layer := filepath.Join(filepath.Dir(backend.ThreadDir(dataDir, "lu", "writer")), "user-data", layerName)
	if _, err := os.Stat(layer); err != nil {
		t.Fatalf("the layer is not in the thread's data: %v", err)
	}
	if err := p.Destroy(backendtest.Ctx(t), info); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := p.LayerBytes(backendtest.Ctx(t), info); ok || err != nil {
		t.Errorf("LayerBytes of a destroyed sandbox: %v, %v; want none", ok, err)
	}
	if _, err := os.Lstat(layer); err == nil {
		t.Error("the layer outlived its sandbox")
	}
	if after := measure(t, dataDir, "lu", "writer", quota); after.Bytes >= grown.Bytes-(8<<20) {
		t.Errorf("thread data %d bytes after destroy, was %d with the layer", after.Bytes, grown.Bytes)
	}
	if out := backendtest.Exec(t, backendtest.MustCreate(t, p, spec), look).Output; strings.Contains(out, "SEES") ||
		!strings.Contains(out, "x\ndone\n") {
		t.Errorf("the recreated sandbox has the destroyed one's writes: %q", out)
	}

	ro := newProcessWith(t, Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), ReadOnlyImage: true})
	roSpec := backendtest.Spec(t, mc, "lu", "read-only")
	roSpec.Template = tpl
	if res := backendtest.Exec(t, backendtest.MustCreate(t, ro, roSpec), `echo x >/bin/tool`); res.ExitCode == 0 {
		t.Error("ReadOnlyImage: a sandbox wrote into its image")
	}
}

// A pre-started template sandbox's layer moves with its user data when a
// thread claims it: the claimed sandbox keeps what it wrote, and its
// destroy removes the layer from the thread's data, where it now is.
func TestTemplateLayerClaimed(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (idmapped mounts)")
	img := importedSandboxImage(t)
	dataDir := t.TempDir()
	p := newProcess(t, t.TempDir())
	mc := backend.MountConfig{DataDir: dataDir}
	tpl := backend.Template{Name: "busybox", RootFS: img.RootFS, RootEnv: img.Env}
	const pw = "0123456789abcdef"
	mounts, err := backend.PrewarmMounts(mc, pw)
	if err != nil {
		t.Fatal(err)
	}
	warm := backendtest.MustCreate(t, p, backend.Spec{SandboxID: pw, Mounts: mounts, Template: tpl})
	if res := backendtest.Exec(t, warm, `echo WARM >/bin/mark`); res.ExitCode != 0 {
		t.Fatalf("write into the image: %q", res.Output)
	}
	spec := backendtest.Spec(t, mc, "cu", "claimer")
	spec.Template = tpl
	if err := backend.AdoptPrewarmDirs(dataDir, pw, "cu", "claimer"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	info, err := p.Bind(ctx, warm, spec)
	if err != nil {
		t.Fatal(err)
	}
	if out := backendtest.Exec(t, info, `cat /bin/mark`).Output; strings.TrimSpace(out) != "WARM" {
		t.Errorf("the claimed sandbox lost its layer: %q", out)
	}
	layer := filepath.Join(backend.ThreadDir(dataDir, "cu", "claimer"), layerName)
	if _, err := os.Stat(filepath.Join(layer, "upper", "bin", "mark")); err != nil {
		t.Fatalf("the layer did not move to the thread: %v", err)
	}
	if err := p.Destroy(ctx, info); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(layer); err == nil {
		t.Error("the claimed sandbox's layer outlived it")
	}
}
