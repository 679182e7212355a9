package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// TestTrafficCountsASandboxsBytes: a sandbox's socket counts what it sent
// and got, for a forwarded request and a CONNECT tunnel alike, and its
// counters go with its socket.
func TestTrafficCountsASandboxsBytes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	if tr, ok := f.p.Traffic("sb-1"); !ok || tr != (Traffic{}) {
		t.Fatalf("before any request: %+v %v, want zero counters", tr, ok)
	}
	if _, ok := f.p.Traffic("sb-2"); ok {
		t.Fatal("a sandbox the proxy does not serve has counters")
	}
	cl := f.client(w.roots)
	for _, u := range []string{fmt.Sprintf("http://allowed.test:%d/download", w.port), fmt.Sprintf("https://allowed.test:%d/download", w.tlsPort)} {
		resp, err := cl.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != int64(len(download)) {
			t.Fatalf("%s: %d bytes", u, n)
		}
	}
	up := bytes.Repeat([]byte("x"), 512<<10)
	resp, err := cl.Post(fmt.Sprintf("http://allowed.test:%d/upload", w.port), "application/octet-stream", bytes.NewReader(up))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cl.CloseIdleConnections()
	tr, _ := waitTraffic(f.p, "sb-1", func(tr Traffic) bool {
		return tr.Received >= 2*int64(len(download)) && tr.Sent >= int64(len(up))
	})
	// Two downloads plus headers and TLS; the upload plus requests and a
	// handshake: counted once each, so within a few KiB of the payload.
	if want := 2 * int64(len(download)); tr.Received < want || tr.Received > want+64<<10 {
		t.Errorf("received %d, want the two 1 MiB downloads (%d) and a little", tr.Received, want)
	}
	if want := int64(len(up)); tr.Sent < want || tr.Sent > want+64<<10 {
		t.Errorf("sent %d, want the 512 KiB upload (%d) and a little", tr.Sent, want)
	}
	// A refusal is traffic too: the request went in, the 403 came back.
	before := tr
	if resp, _ := f.raw(t, get("http://other.test:%d/", w.port)); resp.StatusCode != 403 {
		t.Fatalf("other.test: %d", resp.StatusCode)
	}
	if tr, _ = waitTraffic(f.p, "sb-1", func(tr Traffic) bool { return tr.Sent > before.Sent && tr.Received > before.Received }); tr.Sent <= before.Sent || tr.Received <= before.Received {
		t.Errorf("a refused request moved no counter: %+v then %+v", before, tr)
	}
	f.p.Close("sb-1")
	if _, ok := f.p.Traffic("sb-1"); ok {
		t.Error("a closed sandbox keeps its counters")
	}
}

// TestTrafficOfAuthenticatedSandboxes: on ServeAuth's listener each
// request counts to the sandbox its credential names; a refused
// credential counts to none.
func TestTrafficOfAuthenticatedSandboxes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.p.ServeAuth(ln, func(id, password string, _ netip.Addr) (backend.EgressIdentity, bool) { //nolint:errcheck // ends with the fixture
		if password != "s3cret" {
			return backend.EgressIdentity{}, false
		}
		return backend.EgressIdentity{SandboxID: id, Egress: backend.Egress{Allow: []string{"allowed.test"}}}, true
	})
	get := func(user string) int {
		tr := &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+user+"@"+ln.Addr().String()))}
		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://allowed.test:%d/download", w.port), nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck // counted by the proxy
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("pod-1:s3cret"); code != 200 {
		t.Fatalf("pod-1: %d", code)
	}
	if code := get("pod-2:wrong"); code != 407 {
		t.Fatalf("pod-2 with a wrong password: %d", code)
	}
	if tr, ok := waitTraffic(f.p, "pod-1", func(tr Traffic) bool { return tr.Received >= int64(len(download)) && tr.Sent > 0 }); !ok {
		t.Errorf("pod-1: %+v, want its 1 MiB download", tr)
	}
	if tr, ok := f.p.Traffic("pod-2"); ok {
		t.Errorf("a refused credential has counters: %+v", tr)
	}
}

// waitTraffic waits up to 5 s for sid's counters to satisfy done and
// returns them: the proxy counts a write once it returned, which may be
// after the client read its last byte.
func waitTraffic(p *Proxy, sid string, done func(Traffic) bool) (Traffic, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr, ok := p.Traffic(sid)
		if ok && done(tr) {
			return tr, true
		}
		if time.Now().After(deadline) {
			return tr, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
