package deploy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// upstreamLine is the one server line of deployments/nginx/sandgate.conf:
// the compose service name, re-resolved through Docker's DNS.
var upstreamLine = regexp.MustCompile(`(?m)^(\s*)server gateway:8080 resolve( [^;]*);$`)

// TestNginxConfig runs deployments/nginx/sandgate.conf in a real nginx, its
// upstream name swapped for two local stand-in gateways, and checks what the
// compose stack relies on: round robin, WebSocket upgrades passed through,
// responses streamed unbuffered, forwarding headers.
func TestNginxConfig(t *testing.T) {
	t.Parallel()
	testutil.Nginx(t) // before the stand-ins start: fail or skip at once

	release := make(chan struct{})
	a, b := standIn(t, "a", release), standIn(t, "b", release)
	conf, err := os.ReadFile(repoPath("deployments", "nginx", "sandgate.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !upstreamLine.Match(conf) || !strings.Contains(string(conf), "\n    listen 8080;\n") {
		t.Fatalf("sandgate.conf no longer has the upstream and listen lines this test swaps")
	}
	// `resolve` needs nginx >= 1.27.3 (the compose image); Debian's is older,
	// and the stand-ins have fixed addresses anyway.
	local := upstreamLine.ReplaceAllString(string(conf), fmt.Sprintf("${1}server %s${2};\n${1}server %s${2};", a, b))
	port := testutil.FreePort(t)
	local = strings.Replace(local, "\n    listen 8080;\n", fmt.Sprintf("\n    listen 127.0.0.1:%d;\n", port), 1)
	dir := t.TempDir()
	const accessLog = "access_log /var/log/nginx/access.log sandgate;"
	if !strings.Contains(local, accessLog) {
		t.Fatalf("sandgate.conf no longer has the access_log line this test swaps")
	}
	local = strings.Replace(local, accessLog, "access_log "+filepath.Join(dir, "access.log")+" sandgate;", 1)

	if err := os.WriteFile(filepath.Join(dir, "sandgate.conf"), []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.StartNginx(t, dir, "    access_log off;\n    include "+filepath.Join(dir, "sandgate.conf")+";")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	waitOK(t, hc, base+"/who", 10*time.Second)

	t.Run("round robin", func(t *testing.T) {
		got := map[string]int{}
		for range 10 {
			resp, err := hc.Get(base + "/who")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got[string(body)]++
		}
		if got["a"] != 5 || got["b"] != 5 {
			t.Errorf("10 requests went %v, want 5 to each gateway", got)
		}
	})

	t.Run("capability redacted in the access log", func(t *testing.T) {
		const capability = "c2VjcmV0LWNhcGFiaWxpdHktdmFsdWUtMDEyMzQ1Njc"
		resp, err := hc.Get(base + "/c/" + capability + "/v1/sandbox?x=1")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// nginx writes the line after the response; wait for it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			log, _ := os.ReadFile(filepath.Join(dir, "access.log"))
			if strings.Contains(string(log), capability) {
				t.Fatalf("the capability is in nginx's access log:\n%s", log)
			}
			if strings.Contains(string(log), `"GET /c/{capability}/v1/sandbox?x=1 HTTP/1.1"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no redacted line in nginx's access log:\n%s", log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("forwarding headers", func(t *testing.T) {
		resp, err := hc.Get(base + "/headers")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{"X-Forwarded-For=127.0.0.1", "X-Forwarded-Proto=http", fmt.Sprintf("Host=127.0.0.1:%d", port)} {
			if !strings.Contains(string(body), want) {
				t.Errorf("upstream saw %q, lacks %q", body, want)
			}
		}
	})

	t.Run("streams unbuffered", func(t *testing.T) {
		resp, err := hc.Get(base + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		// The first line arrives while the upstream still holds the rest.
		first, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || first != "data: first\n" {
			t.Fatalf("first line %q, %v", first, err)
		}
		close(release)
	})

	t.Run("websocket upgrade", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: sandgate\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answered %d", resp.StatusCode)
		}
		// After the upgrade nginx is a byte pipe both ways.
		fmt.Fprint(conn, "ping\n")
		if echo, err := br.ReadString('\n'); err != nil || echo != "echo: ping\n" {
			t.Errorf("through the upgraded connection: %q, %v", echo, err)
		}
	})
}

// standIn is a stand-in gateway on a loopback port: /who names it,
// /headers echoes what it was sent, /stream sends one line and holds the
// rest until release, /ws upgrades (only when asked as a WebSocket) and
// then echoes lines.
func standIn(t *testing.T, name string, release <-chan struct{}) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/who", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) })
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "Host=%s X-Forwarded-For=%s X-Forwarded-Proto=%s", r.Host,
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"))
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "data: second\n")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "not an upgrade: Upgrade="+r.Header.Get("Upgrade")+" Connection="+r.Header.Get("Connection"), http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		line, err := rw.ReadString('\n')
		if err == nil {
			rw.WriteString("echo: " + line)
			rw.Flush()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	})
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
}
