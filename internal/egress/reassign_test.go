package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// TestReassign: a claimed pre-started sandbox's socket serves the thread's
// identity at once, on the connection its client already holds: the new
// policy decides, the log and the byte counters name the thread, and the
// socket file is the one it had (no new inode on a claim). An id without
// a listener is opened; a bad policy is refused and changes nothing.
func TestReassign(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	var dials atomic.Int32
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.socket)
		},
	}}
	status := func(host string) int {
		t.Helper()
		resp, err := cl.Get(fmt.Sprintf("http://%s:%d/", host, w.port))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("allowed.test"); got != http.StatusOK {
		t.Fatalf("before: allowed.test %d", got)
	}
	before, _ := os.Stat(f.socket)
	sent, _ := f.p.Traffic("sb-1")

	thread := backend.EgressIdentity{SandboxID: "sb-9", User: "bob", Thread: "th-9", Egress: backend.Egress{Allow: []string{"other.test"}}}
	if err := f.p.Reassign("sb-1", thread, f.socket); err != nil {
		t.Fatal(err)
	}
	if got := status("allowed.test"); got != http.StatusForbidden {
		t.Errorf("after: allowed.test %d, want 403 by the thread's policy", got)
	}
	if got := status("other.test"); got != http.StatusOK {
		t.Errorf("after: other.test %d, want 200 by the thread's policy", got)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections, want the one kept alive across the reassignment", n)
	}
	if after, err := os.Stat(f.socket); err != nil || !os.SameFile(before, after) {
		t.Errorf("socket replaced by the reassignment: %v", err)
	}
	lines := f.logs.waitLines(t, 3)
	if last := lines[len(lines)-1]; last["sandbox_id"] != "sb-9" || last["thread"] != "th-9" || last["user"] != "bob" {
		t.Errorf("log after the reassignment names %v/%v/%v, want sb-9/bob/th-9", last["sandbox_id"], last["user"], last["thread"])
	}
	if _, ok := f.p.Traffic("sb-1"); ok {
		t.Error("the pre-started id keeps counters")
	}
	if tr, ok := f.p.Traffic("sb-9"); !ok || tr.Received <= sent.Received {
		t.Errorf("thread's counters %+v %v, want the pre-started socket's and more", tr, ok)
	}

	bad := thread
	bad.SandboxID, bad.Egress = "sb-10", backend.Egress{Mode: "wide"}
	if err := f.p.Reassign("sb-9", bad, f.socket); err == nil {
		t.Error("Reassign accepted an invalid policy")
	}
	if got := status("other.test"); got != http.StatusOK {
		t.Errorf("after a refused reassignment: other.test %d, want 200", got)
	}

	// from's listener at another path: closed, and the new one opened.
	moved := filepath.Join(filepath.Dir(f.socket), "moved.sock")
	if err := f.p.Reassign("sb-9", backend.EgressIdentity{SandboxID: "sb-12", Egress: thread.Egress}, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(f.socket); !os.IsNotExist(err) {
		t.Errorf("the old socket is still there after a reassignment to another path: %v", err)
	}
	if _, ok := f.p.Traffic("sb-9"); ok {
		t.Error("the old id is still served after a reassignment to another path")
	}
	f.p.Close("sb-12")

	// Nothing served for the old id (a gateway restarted since): opened.
	fresh := filepath.Join(filepath.Dir(f.socket), "fresh.sock")
	if err := f.p.Reassign("sb-gone", backend.EgressIdentity{SandboxID: "sb-11", Egress: backend.Egress{Allow: []string{"allowed.test"}}}, fresh); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("no socket opened for an id without a listener: %v", err)
	}
	f.p.Close("sb-11")
}
