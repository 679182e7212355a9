package process

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// TestSecretDeliveredAndRecoverable: a sandbox created with a secret
// requires it (401 without, 200 with), the secret is on neither its command
// line nor in its environment, and another backend instance on the same
// state dir (a gateway that lost its Redis) gets it back from Discover and
// List; the state file holding it is private.
func TestSecretDeliveredAndRecoverable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newProcess(t, dir)
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "u", "secret-thread")
	spec.Secret = "process-backend-secret-0123456789abcdef"
	info := backendtest.MustCreate(t, p, spec)
	if info.Secret != spec.Secret {
		t.Fatalf("Create returned secret %q", info.Secret)
	}
	for _, c := range []struct {
		key  string
		want int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {spec.Secret, http.StatusOK}} {
		if got := backendtest.Status(t, info.URL, c.key); got != c.want {
			t.Fatalf("key %q: status %d, want %d", c.key, got, c.want)
		}
	}
	pid, _, err := parseIncarnation(info.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cmdline", "environ"} {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		if err != nil && f == "cmdline" {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), spec.Secret) {
			t.Fatalf("secret in /proc/%d/%s", pid, f)
		}
	}

	other := newProcess(t, dir)
	found, ok, err := other.Discover(backendtest.Ctx(t), spec.SandboxID)
	if err != nil || !ok || found.Secret != spec.Secret {
		t.Fatalf("Discover: ok=%v err=%v secret=%q", ok, err, found.Secret)
	}
	list, err := other.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Secret != spec.Secret {
		t.Fatalf("List: %d sandboxes, err %v", len(list), err)
	}
	fi, err := os.Stat(p.statePath(spec.SandboxID))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", fi.Mode(), err)
	}
}
