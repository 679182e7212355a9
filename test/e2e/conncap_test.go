package e2e

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Finding 6 of issue 33: clients that send a head and stall in its body
// (unauthenticated status logins; checkpoint, fork and MCP calls), more of
// them than the gateway has descriptors, must neither take /healthz down
// for another client nor stay open: past max_connections_per_source they
// are closed at once, and the ones let in are closed at body_timeout.
func TestStalledBodiesPastTheDescriptorLimit(t *testing.T) {
	t.Parallel()
	const (
		nofile      = 256
		stalled     = 400 // > nofile
		perSource   = 20
		bodyTimeout = 2 * time.Second
	)
	f := newFleet(t, "--auth-api-keys", "admin="+sha("admin-key")+":threads+admin",
		"--max-connections-per-source", strconv.Itoa(perSource), "--body-timeout", bodyTimeout.String())
	// The gateway runs with a low descriptor limit, soft and hard (Go raises
	// the soft one to the hard one at start).
	wrapper := filepath.Join(t.TempDir(), "gateway-nofile")
	script := "#!/bin/sh\nulimit -n " + strconv.Itoa(nofile) + " || exit 1\nexec '" + f.bin + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.bin = wrapper
	g := f.start()
	pid := strconv.Itoa(g.cmd.Process.Pid)
	limits, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil || !strings.Contains(string(limits), "Max open files            "+strconv.Itoa(nofile)) {
		t.Fatalf("the gateway does not run with %d descriptors (%v):\n%s", nofile, err, limits)
	}
	fds := func() int {
		entries, err := os.ReadDir("/proc/" + pid + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	baseline := fds()

	addr := strings.TrimPrefix(g.URL, "http://")
	// The unauthenticated login, and the routes whose bodies the gateway
	// reads itself, as a tenant with a key.
	heads := []string{
		"POST /status/login HTTP/1.1\r\nHost: " + addr +
			"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntoken=",
	}
	for _, path := range []string{"/threads/t/checkpoints", "/threads/t/fork", "/threads/t/mcp"} {
		heads = append(heads, "POST "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: Bearer admin-key"+
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\": ")
	}
	conns := make([]net.Conn, 0, stalled)
	for i := range stalled {
		head := heads[i%len(heads)]
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial after %d stalled: %v", len(conns), err)
		}
		t.Cleanup(func() { c.Close() })
		// A write to a connection the gateway closed already may fail:
		// that is the cap working.
		_, _ = c.Write([]byte(head))
		conns = append(conns, c)
	}
	sent := time.Now()

	// Another source is served at once, while the stalled ones are open.
	other := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	began := time.Now()
	resp, err := other.Get(g.URL + "/healthz")
	if err != nil {
		t.Fatalf("/healthz from 127.0.0.2 with %d stalled bodies from 127.0.0.1 open: %v\n%s", stalled, err, tail(g.logs.String(), 20))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz from 127.0.0.2: %d, want 200", resp.StatusCode)
	}
	t.Logf("/healthz from 127.0.0.2 answered in %s with %d stalled bodies open (gateway fds %d -> %d)",
		time.Since(began), stalled, baseline, fds())

	// Every stalled connection is closed by the gateway: past the cap at
	// once, the others at body_timeout.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []int
	var last time.Duration
	for i, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(sent.Add(bodyTimeout + 10*time.Second))
			_, err := io.Copy(io.Discard, c)
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				open = append(open, i)
				return
			}
			last = max(last, time.Since(sent))
		})
	}
	wg.Wait()
	if len(open) > 0 {
		t.Fatalf("%d of %d stalled bodies still open %s after body_timeout %s (first: #%d)",
			len(open), stalled, 10*time.Second, bodyTimeout, open[0])
	}
	t.Logf("all %d stalled bodies closed by the gateway, the last %s after the stall began", stalled, last)
	waitForIn(t, 5*time.Second, func() bool { return fds() <= baseline+5 })
}
