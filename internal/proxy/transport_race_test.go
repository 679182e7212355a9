package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// upgradeRequest asks u for the test protocol of rawEcho.
func upgradeRequest(t testing.TB, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "test-proto")
	return req
}

// Upgrade requests racing the pool's close (a sandbox retired while a
// WebSocket opens): each one either upgrades or is refused as closed, and
// -race sees every access to the upgrade transport synchronised.
func TestTransportCloseRacesUpgrades(t *testing.T) {
	t.Parallel()
	up := rawEcho(t)
	for range 20 {
		tr := NewTransport(TransportConfig{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				resp, err := tr.RoundTrip(upgradeRequest(t, up.URL))
				if err != nil {
					if !errors.Is(err, errTransportClosed) {
						t.Errorf("upgrade racing close: %v", err)
					}
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusSwitchingProtocols {
					t.Errorf("upgrade racing close: status %d", resp.StatusCode)
				}
			})
		}
		tr.CloseIdleConnections()
		wg.Wait()
	}
}

// After close, an upgrade is refused with the pool's closed error (retried
// like a dial failure) and opens no connection, whether or not the upgrade
// transport was built before.
func TestClosedTransportRefusesUpgrades(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		before int // upgrades done before close
	}{
		{name: "never upgraded", before: 0},
		{name: "upgraded before", before: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := rawEcho(t)
			tr := NewTransport(TransportConfig{})
			for range c.before {
				resp, err := tr.RoundTrip(upgradeRequest(t, up.URL))
				if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("upgrade before close: %v %v", resp, err)
				}
				_ = resp.Body.Close()
			}
			tr.CloseIdleConnections()
			resp, err := tr.RoundTrip(upgradeRequest(t, up.URL))
			if !errors.Is(err, errTransportClosed) || !isDial(err) {
				t.Fatalf("upgrade after close: %v %v, want %v", resp, err, errTransportClosed)
			}
			if n := up.conns.Load(); n != int32(c.before) {
				t.Fatalf("upstream saw %d connections, want %d", n, c.before)
			}
		})
	}
}

// An upgrade that got the upgrade transport just before the pool closed
// dials nothing after it.
func TestUpgradeTakenBeforeCloseDialsNothing(t *testing.T) {
	t.Parallel()
	up := rawEcho(t)
	tr := NewTransport(TransportConfig{})
	std, err := tr.upgrader()
	if err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	if _, err := std.RoundTrip(upgradeRequest(t, up.URL)); !errors.Is(err, errTransportClosed) {
		t.Fatalf("upgrade after close: %v, want %v", err, errTransportClosed)
	}
	if n := up.conns.Load(); n != 0 {
		t.Fatalf("upstream saw %d connections after close", n)
	}
}

// Through the proxy, an upgrade on a retired route goes to the replacement,
// as any request does.
func TestRetiredPoolRetriesUpgradeOnTheReplacement(t *testing.T) {
	t.Parallel()
	retired := newTarget(t, rawEcho(t).URL)
	retired.rt.CloseIdleConnections()
	res := &fixedResolver{next: newTarget(t, rawEcho(t).URL)}
	gw := gatewayFor(t, New(Config{}, res, errWriter, nil), func() Upstream { return retired })
	conn, br, status := upgrade(t, gw)
	if status != http.StatusSwitchingProtocols || res.calls.Load() != 1 {
		t.Fatalf("upgrade on a retired route: %d after %d re-resolves", status, res.calls.Load())
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the replacement: %q %v", line, err)
	}
}

// BenchmarkTransportRoundTrip is the non-upgrade hot path: one small GET on
// a pooled connection, body read to the end.
func BenchmarkTransportRoundTrip(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(up.Close)
	tr := NewTransport(TransportConfig{})
	b.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodGet, up.URL+"/v1/x", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n != 2 {
			b.Fatalf("status %d, %d body bytes", resp.StatusCode, n)
		}
	}
}
