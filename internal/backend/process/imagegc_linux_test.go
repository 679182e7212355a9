package process

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/imagestore"
)

// The image store's collection as the gateway runs it (imageGC.Pass:
// Collect keeping SystemRoots), with a real jailed sandbox running a
// template's rootfs whose template is no longer configured: the rootfs is
// kept while the sandbox lives and the sandbox still runs the image's
// programs after the collection; once it is destroyed the rootfs goes. A
// sandbox whose state does not say what it runs stops the collection.
func TestSystemRootsKeepLiveImage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := imagestore.Open(imagestore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the rootfs is read-only
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	img := importSandboxImage(t, store)
	p := newProcess(t, t.TempDir())
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "gc", "live")
	spec.Template = backend.Template{Name: "removed", RootFS: img.RootFS, RootEnv: img.Env}
	info := backendtest.MustCreate(t, p, spec)
	// A host-root sandbox beside it runs no rootfs.
	backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "gc", "host"))

	const grace = time.Hour
	old := time.Now().Add(-2 * grace)
	collect := func() imagestore.Collected {
		t.Helper()
		if err := os.Chtimes(img.RootFS, old, old); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		live, err := p.SystemRoots(backendtest.Ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		got, err := store.Collect(backendtest.Ctx(t), live, grace)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if live, _ := p.SystemRoots(backendtest.Ctx(t)); !slices.Equal(live, []string{img.RootFS}) {
		t.Fatalf("SystemRoots = %v, want only the template's rootfs (the host-root sandbox runs none)", live)
	}
	if got := collect(); len(got.Removed) != 0 {
		t.Fatalf("collected %v under a live sandbox", got.Removed)
	}
	if out := backendtest.Exec(t, info, "readlink /bin/ls; cat /etc/passwd >/dev/null && echo read").Output; out != "/bin/busybox\nread\n" {
		t.Fatalf("the sandbox after a collection: %q, want the image's busybox still there", out)
	}

	// A state written before roots were recorded: the backend cannot tell,
	// so nothing may be collected.
	path := p.statePath(info.SandboxID)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil || m["system_root"] != img.RootFS {
		t.Fatalf("state records system_root %v (%v), want the rootfs", m["system_root"], err)
	}
	delete(m, "system_root")
	legacy, _ := json.Marshal(m)
	if err := os.WriteFile(path, legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SystemRoots(backendtest.Ctx(t)); err == nil || !strings.Contains(err.Error(), "system root") {
		t.Fatalf("SystemRoots with a state that predates roots = %v, want an error", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := p.Destroy(backendtest.Ctx(t), info); err != nil {
		t.Fatal(err)
	}
	if got := collect(); !slices.Equal(got.Removed, []string{filepath.Base(img.RootFS)}) {
		t.Fatalf("collected %v once its sandbox is gone, want its rootfs", got.Removed)
	}
}
