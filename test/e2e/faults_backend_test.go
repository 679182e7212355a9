package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// The backend itself unreachable: a docker-backend gateway whose engine
// address first refuses connections, then accepts them and never answers,
// then is repaired (forwarded to this machine's real engine). While broken
// every request is a bounded 503 with Retry-After and nothing is leaked;
// repaired, the same thread gets exactly one container.
func TestDockerEngineUnreachableOrHungIs503AndLeaksNothing(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	eng := newEngineSwitch(t)
	f := d.fleet("--docker-host", "tcp://"+eng.addr, "--max-sandboxes", "1", "--cap-mode", "hard",
		"--create-timeout", "3s", "--provision-wait", "10s")
	g := f.start()

	// brokenTry asks twice (the hard cap of 1 turns a leaked reservation
	// into 503 capacity on the second try) and returns what each answer
	// was and how long it took.
	brokenTry := func(phase string) (codes []string) {
		t.Helper()
		for try := range 2 {
			began := time.Now()
			code, body, hdr := call(t, "POST", g.URL+"/threads/engine/v1/shell/exec", map[string]any{"command": "true"})
			took := time.Since(began)
			if code != 503 || hdr.Get("Retry-After") == "" {
				t.Fatalf("%s, try %d: %d %s (Retry-After %q), want 503 with Retry-After", phase, try, code, body, hdr.Get("Retry-After"))
			}
			c := errorCode(t, body)
			if c != "backend_unavailable" && c != "provisioning" {
				t.Fatalf("%s, try %d: code %s, want backend_unavailable (or provisioning while a create hangs)", phase, try, c)
			}
			codes = append(codes, fmt.Sprintf("503 %s in %s", c, round(took)))
			if strings.Contains(string(body), eng.addr) || strings.Contains(string(body), f.dataDir) {
				t.Fatalf("%s: error body names an address or host path: %s", phase, body)
			}
			// A generous bound: the point is an answer, not a hang until the
			// client gives up.
			if took > 20*time.Second {
				t.Fatalf("%s, try %d: answered after %s", phase, try, took)
			}
		}
		if code, _, _ := call(t, "GET", g.URL+"/readyz", nil); code != 503 {
			t.Errorf("%s: readyz %d, want 503", phase, code)
		}
		return codes
	}

	codes := brokenTry("engine refusing connections")
	assertNothingLeaked(t, f, g, "engine")
	measured(t, "engine refusing connections: %s; 0 leaked", strings.Join(codes, ", "))

	eng.set(engineHung)
	codes = brokenTry("engine accepting but never answering")
	// A hung attempt (Discover, then Create) is bounded by create_timeout +
	// lock_ttl (3s + 15s): then it must have given back its lock and
	// reservation.
	waitForIn(t, 30*time.Second, func() bool { return leakFree(f, "engine") })
	assertNothingLeaked(t, f, g, "engine")
	measured(t, "engine accepting but never answering: %s; 0 leaked once the attempt's bound (create_timeout + lock_ttl) passed", strings.Join(codes, ", "))
	if n := len(d.containers()); n != 0 {
		t.Fatalf("%d containers while the engine was unreachable", n)
	}

	eng.set(engineForward)
	repaired := time.Now()
	var out execData
	waitForIn(t, 60*time.Second, func() bool {
		code, body, _ := call(t, "POST", g.URL+"/threads/engine/v1/shell/exec", map[string]any{"command": "echo back"})
		return code == 200 && strings.Contains(string(body), `"output":"back\n"`)
	})
	recovered := time.Since(repaired)
	out = shell(t, g.URL, "engine", "echo again")
	if strings.TrimSpace(out.Output) != "again" {
		t.Fatalf("after repair: %+v", out)
	}
	if n := len(d.containers()); n != 1 {
		t.Fatalf("%d containers after repair, want 1", n)
	}
	if code, _, _ := call(t, "GET", g.URL+"/readyz", nil); code != 200 {
		t.Errorf("readyz after repair: %d", code)
	}
	measured(t, "engine repaired: first 200 after %s, 1 container", round(recovered))
}

// engineMode is what the fake engine address does with a connection.
type engineMode int

const (
	engineDown    engineMode = iota // nothing listens: connection refused
	engineHung                      // accepted, never answered
	engineForward                   // forwarded to the real engine
)

// engineSwitch is a loopback address standing in for the Docker engine,
// whose behaviour the test switches.
type engineSwitch struct {
	t    *testing.T
	addr string
	// network and real are the real engine's address (DOCKER_HOST).
	network, real string

	mu    sync.Mutex
	ln    net.Listener
	mode  engineMode
	conns []net.Conn
}

func newEngineSwitch(t *testing.T) *engineSwitch {
	t.Helper()
	network, real := "unix", "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		var ok bool
		network, real, ok = strings.Cut(h, "://")
		if !ok || (network != "unix" && network != "tcp") {
			requireOrSkip(t, "DOCKER_HOST %s is neither unix:// nor tcp://; the forwarder needs one of them", h)
		}
	}
	e := &engineSwitch{t: t, addr: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)), network: network, real: real}
	t.Cleanup(func() { e.set(engineDown) })
	return e
}

// set switches the mode; leaving a mode drops its connections, as a
// restarted engine would.
func (e *engineSwitch) set(m engineMode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mode = m
	for _, c := range e.conns {
		c.Close()
	}
	e.conns = nil
	if m == engineDown {
		if e.ln != nil {
			e.ln.Close()
			e.ln = nil
		}
		return
	}
	if e.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		e.t.Fatalf("fake engine listen: %v", err)
	}
	e.ln = ln
	go e.serve(ln)
}

func (e *engineSwitch) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		mode := e.mode
		e.conns = append(e.conns, c)
		e.mu.Unlock()
		if mode == engineForward {
			go forward(c, e.network, e.real)
		}
	}
}

// forward pipes c to the engine at network/addr until either side closes.
func forward(c net.Conn, network, addr string) {
	defer c.Close()
	up, err := net.Dial(network, addr)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	for _, p := range [][2]net.Conn{{up, c}, {c, up}} {
		go func() {
			_, _ = io.Copy(p[0], p[1])
			done <- struct{}{}
		}()
	}
	<-done
}

// leakFree is assertNothingLeaked's Redis part as a condition: no record,
// lock or capacity reservation of thread left.
func leakFree(f *fleet, thread string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := leftKeys(ctx, f, thread)
	return err == nil && n == 0
}
