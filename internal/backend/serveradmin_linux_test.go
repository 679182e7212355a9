package backend_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// states is the state letter of every descendant of root, from /proc.
func states(root int) map[int]byte {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	state := map[int]byte{}
	for _, e := range ents {
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(e.Name())
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:])) // field N at N-3
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
		state[pid] = f[0][0]
	}
	out := map[int]byte{}
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			if state[c] != 'Z' {
				out[c] = state[c]
			}
			queue = append(queue, c)
		}
	}
	return out
}

// waitStates waits until the server has at least two descendants (the
// command's shell and the sh it starts in the background) and all are in
// the wanted state: the shell can be running before its child exists.
func waitStates(t *testing.T, root int, want byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := states(root)
		all := len(st) >= 2
		for _, s := range st {
			all = all && (s == 'T') == (want == 'T')
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's processes %v: want all %s", st, map[byte]string{'T': "stopped", 'R': "running"}[want])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServerFreezerAndStats drives a real sandbox server process through
// the gateway's client: Freeze stops the command it runs (and Thaw
// continues it), ServerStats sees its CPU grow; a wrong secret is refused
// and stops nothing; a server that does not answer is ErrUnavailable, one
// without the routes (a third-party image) ErrNotSupported.
func TestServerFreezerAndStats(t *testing.T) {
	t.Parallel()
	srv := testutil.StartSandboxServer(t)
	info := backend.Info{SandboxID: "fay-admin", URL: srv.URL, Secret: srv.Secret}
	ctx := t.Context()

	body, _ := json.Marshal(map[string]any{"command": "sh -c 'while :; do :; done' & while :; do :; done", "async_mode": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/shell/exec", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sandboxspec.SecretHeader, srv.Secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("start a command: %v %v", resp, err)
	}
	resp.Body.Close()
	waitStates(t, srv.PID, 'R')

	s0, err := backend.ServerStats(ctx, info)
	if err != nil || s0.MemoryBytes <= 0 || s0.PIDs < 3 || s0.At.IsZero() {
		t.Fatalf("ServerStats = %+v, %v", s0, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		s1, err := backend.ServerStats(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		if s1.CPUSeconds >= s0.CPUSeconds+0.5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU seconds of a burning sandbox: %v, then %v", s0.CPUSeconds, s1.CPUSeconds)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var f backend.ServerFreezer
	wrong := info
	wrong.Secret = "wrong-" + srv.Secret
	if err := f.Freeze(ctx, wrong); err == nil || errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Freeze with a wrong secret = %v, want a 401 error", err)
	}
	if _, err := backend.ServerStats(ctx, wrong); err == nil {
		t.Error("ServerStats with a wrong secret succeeded")
	}
	time.Sleep(100 * time.Millisecond)
	waitStates(t, srv.PID, 'R') // the refused freeze stopped nothing

	for range 2 {
		if err := f.Freeze(ctx, info); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
	}
	waitStates(t, srv.PID, 'T')
	for range 2 {
		if err := f.Thaw(ctx, info); err != nil {
			t.Fatalf("Thaw: %v", err)
		}
	}
	waitStates(t, srv.PID, 'R')

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := backend.Info{SandboxID: "fay-gone", URL: "http://" + ln.Addr().String()}
	ln.Close()
	if err := f.Freeze(ctx, gone); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Freeze of a sandbox that does not answer = %v, want ErrUnavailable", err)
	}
	aio := httptest.NewServer(http.NotFoundHandler()) // a third-party image: no Sandgate routes
	t.Cleanup(aio.Close)
	if _, err := backend.ServerStats(ctx, backend.Info{SandboxID: "fay-aio", URL: aio.URL}); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("ServerStats of a server without the route = %v, want ErrNotSupported", err)
	}
}
