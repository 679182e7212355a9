package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestRemoteSandboxTransportRefusesUnsafeAddresses: the remote backend's
// data-plane connections refuse the addresses no sandbox lives at, checked
// on the resolved address at dial time: 0.0.0.0 (loopback on Linux, the
// trap here), in any spelling, is never connected to; a safe address is.
// The other backends' transport is unchanged (it reaches the trap through
// 0.0.0.0: the control that the trap is reachable that way).
func TestRemoteSandboxTransportRefusesUnsafeAddresses(t *testing.T) {
	t.Parallel()
	trap := testutil.NewTrap(t)
	get := func(rt http.RoundTripper, url string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	remoteRT := sandboxTransport("remote", config.ImplSandgate)("")
	for _, u := range []string{"http://0.0.0.0:" + trap.Port + "/v1/sandbox", "http://[::ffff:0.0.0.0]:" + trap.Port + "/v1/sandbox"} {
		if err := get(remoteRT, u); err == nil {
			t.Errorf("remote transport connected to %s", u)
		}
	}
	if n := trap.Conns(); n != 0 {
		t.Fatalf("the remote transport reached 0.0.0.0: %d connections", n)
	}
	if err := get(remoteRT, trap.URL+"/v1/sandbox"); err != nil || trap.Conns() != 1 {
		t.Fatalf("remote transport to %s: %v (%d connections)", trap.URL, err, trap.Conns())
	}
	if err := get(sandboxTransport("process", config.ImplSandgate)(""), "http://0.0.0.0:"+trap.Port+"/v1/sandbox"); err != nil || trap.Conns() != 2 {
		t.Fatalf("control: the process backend's transport through 0.0.0.0: %v (%d connections)", err, trap.Conns())
	}
}
