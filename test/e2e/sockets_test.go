package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/egress"
)

// decoyDaemon is an HTTP server on a Unix socket outside every sandbox,
// standing in for the Docker Engine's socket (or any daemon of the host):
// it counts the connections it is given and answers with a marker.
type decoyDaemon struct {
	path  string
	conns atomic.Int32
}

const decoyMarker = "decoy-daemon-answered"

func newDecoyDaemon(t *testing.T) *decoyDaemon {
	t.Helper()
	d := &decoyDaemon{path: filepath.Join(t.TempDir(), "daemon.sock")}
	ln, err := net.Listen("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"success":true,"data":{"output":"`+decoyMarker+`","exit_code":0}}`)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				d.conns.Add(1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return d
}

// apiSocketOf is the host path of the thread's container's API socket and
// the path the container sees it at.
func apiSocketOf(t *testing.T, d *dockerEnv, base, thread string) (host, inside string) {
	t.Helper()
	c := d.containerOf(base, thread)
	sock := c.Config.Labels["io.sandgate.api-socket"]
	for _, m := range c.Mounts {
		if m.Destination == "/run/sandgate/api" || m.Destination == "/run/sandgate" {
			return filepath.Join(m.Source, sock), m.Destination + "/" + sock
		}
	}
	t.Fatalf("%s: no socket dir mounted", thread)
	return "", ""
}

// TestDockerAPISocketSymlinkRefused: code in a docker sandbox replaces its
// API socket with a symlink to a daemon's socket on the host (a test
// server stands in for /var/run/docker.sock). The gateway never connects
// to that daemon: the requests that need a new connection fail with a
// clear error, none is answered by the daemon.
func TestDockerAPISocketSymlinkRefused(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet().start()
	const th = "sock-symlink"
	decoy := newDecoyDaemon(t)
	run(t, g, th, "true")
	hostSock, inside := apiSocketOf(t, d, g.URL, th)
	if _, err := os.Lstat(hostSock); err != nil {
		t.Fatalf("api socket: %v", err)
	}
	// The sandbox swaps its socket for a symlink (the name is what the
	// gateway dials); its server keeps serving the connections it has.
	if out, code := run(t, g, th, fmt.Sprintf("ln -sfn %s %s.new && mv -f %[2]s.new %[2]s && ls -l %[2]s", decoy.path, inside)); code != 0 ||
		!strings.Contains(out, "->") {
		t.Fatalf("swap the socket: %d %s", code, out)
	}
	if fi, err := os.Lstat(hostSock); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Fatalf("the socket was not swapped for a symlink on the host: %v %v", fi, err)
	}
	// Concurrent requests: more than the pool's idle connections, so the
	// gateway dials the socket path anew.
	var wg sync.WaitGroup
	results := make([]execResult, 6)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = <-execAsync(g.URL, th, "sleep 2; echo real-sandbox")
		}()
	}
	wg.Wait()
	failed := 0
	for i, r := range results {
		body := string(r.body)
		if strings.Contains(body, decoyMarker) {
			t.Errorf("request %d was answered by the daemon behind the symlink: %s", i, body)
		}
		if r.err == nil && r.code != 200 {
			failed++
			if r.code != http.StatusBadGateway || !strings.Contains(body, "sandbox_socket_refused") {
				t.Errorf("request %d: %d %s, want 502 sandbox_socket_refused", i, r.code, body)
			}
		}
		t.Logf("request %d: %d %s %v", i, r.code, strings.TrimSpace(body), r.err)
	}
	if n := decoy.conns.Load(); n != 0 {
		t.Fatalf("the gateway connected %d times to the daemon the sandbox's symlink points at, want 0", n)
	}
	if failed == 0 {
		t.Fatal("no request needed a new connection: the symlink was never dialled")
	}
}

// TestDockerEgressDirSwap: the egress socket's directory is not the
// sandbox's to rename or fill, and the Keeper that serves egress sockets
// again never changes a mode by path. Inside the container the sandbox
// tries to rename /run/sandgate/egress away and plant a symlink in it; on
// the host, the test acts as a container that did (the layout before the
// fix let it): the egress dir replaced by one it writes, where an inotify
// watcher swaps every proxy.sock the Keeper binds for a symlink to a
// 0600 file of the host. After 3000 Keeper passes the file is still 0600
// (the old code re-bound there and lost the file within a few dozen).
func TestDockerEgressDirSwap(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet().start()
	const th = "sock-egress"
	out, code := run(t, g, th, "mv /run/sandgate/egress /run/sandgate/egress.moved 2>&1; echo mv=$?; "+
		"ln -s /etc/shadow /run/sandgate/egress/proxy.sock 2>&1; echo ln=$?; "+
		"rmdir /run/sandgate/egress 2>&1; echo rmdir=$?; ls -ld /run/sandgate/egress")
	if code != 0 || !strings.Contains(out, "mv=1") || !strings.Contains(out, "ln=1") || !strings.Contains(out, "rmdir=1") {
		t.Errorf("the sandbox changed its egress dir: exit %d\n%s", code, out)
	}

	// The Keeper against a directory swap, as fast as it can pass.
	sockets := t.TempDir()
	sidDir := filepath.Join(sockets, "0123456789abcdef")
	egressDir := filepath.Join(sidDir, "egress")
	if err := os.MkdirAll(egressDir, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy, err := egress.New(egress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Shutdown(context.Background()) })
	sock := filepath.Join(egressDir, backend.EgressSocketName)
	list := staticSockets{{Identity: backend.EgressIdentity{SandboxID: "0123456789abcdef", User: "bob", Thread: "t"}, Path: sock}}
	keeper := egress.NewKeeper(proxy, list, time.Hour, slog.New(slog.DiscardHandler))
	if n, err := keeper.Pass(context.Background()); n != 1 || err != nil {
		t.Fatalf("first serve: %d %v", n, err)
	}
	// The tenant renames the gateway's egress dir away and puts its own in
	// its place, writable by it.
	if err := os.Rename(egressDir, filepath.Join(sidDir, "egress.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(egressDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(egressDir, 0o777); err != nil {
		t.Fatal(err)
	}
	swaps := raceSocketSwap(t, egressDir, victim)
	const passes = 3000
	rebinds := 0
	for range passes {
		_ = os.Remove(sock) // the tenant clears the name: nobody answers, the Keeper binds again
		n, _ := keeper.Pass(context.Background())
		rebinds += n
		if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("after %d re-binds (%d swaps) the host file is %v (%v), want 0600", rebinds, swaps.Load(), fi.Mode().Perm(), err)
		}
	}
	t.Logf("%d keeper passes, %d re-binds in the tenant's dir, %d swaps: the host file is still 0600", passes, rebinds, swaps.Load())
}

type staticSockets []backend.EgressSocket

func (s staticSockets) EgressSockets(context.Context) ([]backend.EgressSocket, error) { return s, nil }

// raceSocketSwap watches dir with inotify and replaces every proxy.sock
// created in it with a symlink to victim at once; it returns the count of
// swaps made. It stops at the test's end.
func raceSocketSwap(t *testing.T, dir, victim string) *atomic.Int64 {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	var swaps atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		runtime.LockOSThread()
		link := filepath.Join(dir, ".link")
		target := filepath.Join(dir, backend.EgressSocketName)
		buf := make([]byte, 4096)
		for {
			_ = os.Symlink(victim, link)
			n, err := unix.Read(fd, buf)
			select {
			case <-done:
				return
			default:
			}
			if err != nil || n <= 0 {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			if strings.Contains(string(buf[:n]), backend.EgressSocketName) && unix.Rename(link, target) == nil {
				swaps.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		_ = os.WriteFile(filepath.Join(dir, "wake"), nil, 0o600) // an event ends the read
		<-stopped
		unix.Close(fd)
	})
	return &swaps
}
