package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/config"
)

// closingBackend has no sandboxes; it records its Close.
type closingBackend struct{ closed atomic.Bool }

func (*closingBackend) Create(context.Context, backend.Spec) (backend.Info, error) {
	return backend.Info{}, errors.New("closingBackend creates nothing")
}
func (*closingBackend) Destroy(context.Context, backend.Info) error       { return nil }
func (*closingBackend) Alive(context.Context, backend.Info) (bool, error) { return false, nil }
func (*closingBackend) Discover(context.Context, string) (backend.Info, bool, error) {
	return backend.Info{}, false, nil
}
func (*closingBackend) List(context.Context) ([]backend.Info, error) { return nil, nil }
func (b *closingBackend) Close() error                               { b.closed.Store(true); return nil }

// A stopping gateway keeps serving with /readyz failing for drain_delay,
// a second signal (hurry) cuts that short, and once stopped it has closed
// the backend.
func TestStopDrainsThenClosesTheBackend(t *testing.T) {
	// A drain delay longer than the test: only hurry ends it.
	cfg, _, err := config.Load([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--drain-delay", "1m"},
		func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	be := &closingBackend{}
	g, err := newGateway(t.Context(), cfg, slog.New(slog.DiscardHandler),
		func(context.Context, config.Config, *slog.Logger, backend.EgressGate) (backend.Backend, string, error) {
			return be, "fake", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	hurry := make(chan struct{})
	ran := make(chan error, 1)
	go func() { ran <- g.Run(ctx, hurry) }()
	readyz := "http://" + g.Addr().String() + "/readyz"
	waitStatus(t, readyz, http.StatusOK)
	stop()
	// Still accepting, not ready: the balancer's probe sees the drain.
	waitStatus(t, readyz, http.StatusServiceUnavailable)
	if be.closed.Load() {
		t.Fatal("backend closed while the gateway still serves")
	}
	close(hurry)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after hurry")
	}
	if !be.closed.Load() {
		t.Fatal("the gateway stopped without closing its backend")
	}
}

// waitStatus polls url until it answers want, for up to 10 s.
func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			got = err.Error()
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == want {
			return
		}
		got = resp.Status
	}
	t.Fatalf("%s: %s, want %d", url, got, want)
}
