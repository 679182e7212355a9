package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A gateway whose backend binds no host dirs (remote here; kubernetes alike)
// never writes thread dirs to its own disk: with {data_dir}/users a regular
// file, so no thread dir can be made there, the outer gateway still creates
// and serves the thread's sandbox through the inner one.
func TestRemoteBackendNeedsNoGatewayThreadDirs(t *testing.T) {
	t.Parallel()
	inner := newFleet(t)
	ig := inner.start()
	outer := newFleet(t, "--backend", "remote", "--provisioner-url", ig.URL)
	users := filepath.Join(outer.dataDir, "users")
	if err := os.WriteFile(users, []byte("not a dir"), 0o644); err != nil {
		t.Fatal(err)
	}
	og := outer.start()
	if d := shell(t, og.URL, "remote-dirs", "echo served"); strings.TrimSpace(d.Output) != "served" {
		t.Fatalf("exec through the outer gateway: %+v", d)
	}
	if st, err := os.Stat(users); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("the outer gateway's %s: %v %v", users, st, err)
	}
	if n := len(inner.sandboxes()); n != 1 {
		t.Fatalf("%d sandbox processes behind the inner gateway, want 1", n)
	}
}
