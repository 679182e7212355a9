package backend_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestWaitReadyFollowsNoRedirect: a sandbox (whose server its tenant may
// control) answering the readiness probe with a redirect, of every kind,
// to another address is not ready, and the probe, which carries the
// sandbox secret or a provisioner's key, never connects there.
func TestWaitReadyFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	trap := testutil.NewTrap(t)
	for _, status := range []int{301, 302, 303, 307, 308} {
		sbx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, trap.URL+"/v1/sandbox", status)
		}))
		t.Cleanup(sbx.Close)
		for name, wait := range map[string]func(context.Context, string) error{
			"secret": func(ctx context.Context, u string) error {
				return backend.WaitReadySecret(ctx, u, "per-sandbox-secret")
			},
			"authorization": func(ctx context.Context, u string) error {
				return backend.WaitReadyAs(ctx, u, "Bearer provisioner-key")
			},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := wait(ctx, sbx.URL)
			cancel()
			if err == nil {
				t.Errorf("%d with the %s: ready after a redirect", status, name)
			}
		}
	}
	if n := trap.Conns(); n != 0 {
		t.Fatalf("the readiness probe followed a redirect: %d connections reached the redirect's target", n)
	}
}
