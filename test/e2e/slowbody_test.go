package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

// Clients that send headers and part of a body, then stall, are cut with
// 408 after body_idle_timeout: their connections close, the gateway's fds
// return to where they were, and the sandbox (held in flight by them until
// then) is reaped for idleness on time.
func TestStalledBodiesAreCutAndTheSandboxReaped(t *testing.T) {
	t.Parallel()
	const (
		stalled     = 200
		bodyIdle    = 2 * time.Second
		idleTimeout = 3 * time.Second
	)
	f := newFleet(t, "--body-idle-timeout", bodyIdle.String(), "--idle-timeout", idleTimeout.String(), "--reap-interval", "200ms")
	g := f.start()
	shell(t, g.URL, "slow", "true")
	fds := func() int {
		entries, err := os.ReadDir("/proc/" + strconv.Itoa(g.cmd.Process.Pid) + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	baseline := fds()

	addr := strings.TrimPrefix(g.URL, "http://")
	head := "POST /threads/slow/v1/file/write HTTP/1.1\r\nHost: " + addr +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"path\": "
	conns := make([]net.Conn, stalled)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	sent := time.Now()

	// Each connection gets a 408 and is closed by the gateway.
	var wg sync.WaitGroup
	errs := make(chan error, stalled)
	var mu sync.Mutex
	var last time.Duration
	for i, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(sent.Add(bodyIdle + 5*time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				errs <- fmt.Errorf("conn %d: no response: %w", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				errs <- fmt.Errorf("conn %d: status %d, want 408", i, resp.StatusCode)
				return
			}
			if _, err := br.ReadByte(); err == nil || os.IsTimeout(err) {
				errs <- fmt.Errorf("conn %d: still open after the 408 (%v)", i, err)
				return
			}
			mu.Lock()
			last = max(last, time.Since(sent))
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d stalled bodies cut with 408, the last %s after the stall began (body_idle_timeout %s)", stalled, last, bodyIdle)
	if last < bodyIdle {
		t.Errorf("cut after %s, before body_idle_timeout %s", last, bodyIdle)
	}

	// The gateway's fds (client and sandbox connections) are back.
	waitForIn(t, 5*time.Second, func() bool { return fds() <= baseline+5 })

	// No request holds the sandbox any more: it is reaped on time.
	cut := time.Now()
	id := identity.SandboxID("default", "slow")
	waitForIn(t, idleTimeout+5*time.Second, func() bool {
		for _, s := range f.sandboxes() {
			if s.SandboxID == id {
				return false
			}
		}
		return true
	})
	t.Logf("fds %d -> %d; sandbox reaped %s after the cut (idle_timeout %s)", baseline, fds(), time.Since(cut), idleTimeout)
}
