package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// hostileProvisioner is a DeerFlow provisioner whose sandboxes (on the
// same origin) are ready, then answer every other /v1 call with v1.
func hostileProvisioner(t *testing.T, v1 http.HandlerFunc) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	boxes := map[string]map[string]any{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/api/capabilities": // v2: sandboxes of any user
			_, _ = w.Write([]byte(`{"mount_contract_version":2}`))
		case r.Method == http.MethodPost && r.URL.Path == "/api/sandboxes":
			var in struct {
				SandboxID string `json:"sandbox_id"`
				UserID    string `json:"user_id"`
				ThreadID  string `json:"thread_id"`
			}
			_ = json.NewDecoder(r.Body).Decode(&in)
			sb := map[string]any{"sandbox_id": in.SandboxID, "sandbox_url": srv.URL, "status": "Running",
				"user_id": in.UserID, "thread_id": in.ThreadID, "mount_contract_version": 2}
			boxes[in.SandboxID] = sb
			_ = json.NewEncoder(w).Encode(sb)
		case r.Method == http.MethodGet && r.URL.Path == "/api/sandboxes":
			list := []map[string]any{}
			for _, sb := range boxes {
				list = append(list, sb)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"sandboxes": list})
		case strings.HasPrefix(r.URL.Path, "/api/sandboxes/"):
			sb, ok := boxes[strings.TrimPrefix(r.URL.Path, "/api/sandboxes/")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			if r.Method == http.MethodDelete {
				delete(boxes, sb["sandbox_id"].(string))
			}
			_ = json.NewEncoder(w).Encode(sb)
		case r.URL.Path == "/v1/sandbox":
			_, _ = w.Write([]byte(`{"success":true,"data":{}}`))
		case strings.HasPrefix(r.URL.Path, "/v1/"):
			v1(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// writeHugeHead writes a response head of 10 MB in 1 KiB header lines; it
// stops when the gateway hangs up, which is the point.
func writeHugeHead(bw *bufio.ReadWriter) {
	line := "X-Pad-%d: " + strings.Repeat("a", 1000) + "\r\n"
	if _, err := bw.WriteString("HTTP/1.1 200 OK\r\n"); err != nil {
		return
	}
	for i := 0; i < 10<<10; i++ {
		if _, err := fmt.Fprintf(bw, line, i); err != nil {
			return
		}
	}
	_, _ = bw.WriteString("Content-Length: 0\r\n\r\n")
	_ = bw.Flush()
}

// vmRSS is a process's resident set in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestHugeSandboxHeadersCostTheGatewayNoMemory: a sandbox answering 10 MB
// of response headers gets 502 sandbox_headers_too_large, the gateway
// reads no more than its bound of them (RSS grows under 1 MB over five
// such answers after a warm-up; it grew 37 MB for one before the bound), and it goes on serving.
func TestHugeSandboxHeadersCostTheGatewayNoMemory(t *testing.T) {
	t.Parallel()
	// Every /v1 call but readiness is answered with 10 MB of headers.
	prov := hostileProvisioner(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		writeHugeHead(bw)
	})
	f := newFleet(t, "--backend", "remote", "--provisioner-url", prov.URL)
	g := f.start()
	const thread = "huge-heads"
	hostile := func() {
		t.Helper()
		code, body, _ := call(t, "GET", g.URL+"/threads/"+thread+"/v1/shell/sessions", nil)
		if code != http.StatusBadGateway || errorCode(t, body) != "sandbox_headers_too_large" {
			t.Fatalf("huge head answered %d %s, want 502 sandbox_headers_too_large", code, body)
		}
	}
	for range 3 { // warm-up: the code paths are paged in
		hostile()
	}
	before := vmRSS(t, g.cmd.Process.Pid)
	for range 5 {
		hostile()
	}
	after := vmRSS(t, g.cmd.Process.Pid)
	t.Logf("gateway RSS %d KiB -> %d KiB over 5 answers of 10 MB headers", before>>10, after>>10)
	if after-before >= 1<<20 {
		t.Errorf("gateway RSS grew %d KiB, want under 1 MiB", (after-before)>>10)
	}
	if code, body, _ := call(t, "GET", g.URL+"/threads/"+thread+"/v1/sandbox", nil); code != http.StatusOK {
		t.Fatalf("the gateway stopped serving the thread: %d %s", code, body)
	}
}
