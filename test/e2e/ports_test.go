package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/internal/identity"
)

// TestPorts: a web server a command starts inside a sandbox on
// 127.0.0.1:3000 answers through the gateway, by the path route and the
// host route, on the process backend (isolated: the jail has only lo) and
// the docker backend (network none): only the sandbox server, in the same
// network namespace, can reach it. Server-sent events pass one by one and
// a WebSocket echoes, through both proxies; a port with no listener is a 502 naming it within 1 s; another user's
// credential never opens it.
func TestPorts(t *testing.T) {
	t.Parallel()
	wsecho := buildTestdata(t, "wsecho")
	t.Run("process", func(t *testing.T) {
		t.Parallel()
		checkPorts(t, securedFleet(t), wsecho)
	})
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		checkPorts(t, securedFleet(t, newDockerEnv(t).args()...), wsecho)
	})
}

func checkPorts(t *testing.T, g *gateway, wsecho string) {
	const thread = "webapp"
	alice, bob := bearer("alice-key"), bearer("bob-key")
	sid := identity.SandboxID("alice", thread)
	marker := "served from the sandbox of alice " + randomHex(8)

	// busybox httpd daemonises itself, so the command returns while it
	// serves; busybox is in both the docker image and the host's /bin.
	start := "mkdir -p site/sub && printf '%s' '" + marker + "' > site/sub/page.txt && " +
		"busybox httpd -p 127.0.0.1:3000 -h \"$PWD/site\" && echo started"
	if d := shell(t, g.URL, thread, start, alice...); d.ExitCode == nil || *d.ExitCode != 0 || !strings.Contains(d.Output, "started") {
		t.Fatalf("start the server: %+v", d)
	}

	routes := []struct{ name, path, host string }{
		{"path route", "/threads/" + thread + "/ports/3000/sub/page.txt?x=1", ""},
		{"host route", "/sub/page.txt?x=1", "3000-" + sid + "." + hostSuffix},
	}
	for _, rt := range routes {
		var code int
		var body []byte
		// The first request may race the daemon's bind: a few tries.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, body, _ = req{"GET", rt.path, rt.host, nil, alice}.do(t, g)
			if code == 200 || time.Now().After(deadline) {
				break
			}
		}
		if code != 200 || string(body) != marker {
			t.Errorf("%s: %d %s, want the app's %q", rt.name, code, body, marker)
		}
	}

	checkPortSSE(t, g, thread, g.URL+"/threads/"+thread+"/ports/3000/cgi-bin/events", "", bearer("alice-key")...)
	startWsecho(t, g, thread, wsecho)
	checkPortWebSocket(t, g, thread, sid)

	// Nothing listens on 3001: a 502 naming it, at once.
	for _, rt := range []struct{ name, path, host string }{
		{"path route", "/threads/" + thread + "/ports/3001/", ""},
		{"host route", "/", "3001-" + sid + "." + hostSuffix},
	} {
		began := time.Now()
		code, body, _ := req{"GET", rt.path, rt.host, nil, alice}.do(t, g)
		took := time.Since(began)
		var env envelope
		_ = json.Unmarshal(body, &env)
		if code != 502 || env.Message != "nothing listens on port 3001 in the sandbox" || took > time.Second {
			t.Errorf("%s to 3001: %d %s after %s, want 502 naming 3001 within 1s", rt.name, code, body, took)
		}
	}

	// Bad ports are refused before any I/O.
	if code, body, _ := (req{"GET", "/threads/" + thread + "/ports/65536/", "", nil, alice}).do(t, g); code != 400 {
		t.Errorf("port 65536: %d %s, want 400", code, body)
	}

	// Bob: alice's sandbox by host is as unknown as a missing one; his
	// thread of the same name is his own sandbox, where nothing listens.
	if code, body, _ := (req{"GET", "/sub/page.txt", "3000-" + sid + "." + hostSuffix, nil, bob}).do(t, g); code != 404 || strings.Contains(string(body), marker) {
		t.Errorf("bob by alice's host: %d %s, want 404", code, body)
	}
	if code, body, _ := (req{"GET", "/threads/" + thread + "/ports/3000/sub/page.txt", "", nil, bob}).do(t, g); code == 200 || strings.Contains(string(body), marker) {
		t.Errorf("bob's own thread reached alice's server: %d %s", code, body)
	}
	// No credential at all.
	for _, rt := range routes {
		if code, body, _ := (req{"GET", rt.path, rt.host, nil, nil}).do(t, g); code != 401 || strings.Contains(string(body), marker) {
			t.Errorf("%s without a credential: %d %s, want 401", rt.name, code, body)
		}
	}
}

// sseScript is a CGI program of busybox httpd that sends an event and
// then waits for the test's go file before the next: an event that
// arrives before its go file exists was streamed, not buffered.
const sseScript = `#!/bin/sh
printf 'Content-Type: text/event-stream\r\n\r\n'
for i in 1 2 3; do
  printf 'data: event %s\n\n' "$i"
  n=0
  while [ ! -e "go$i" ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
done
`

// checkPortSSE reads an SSE stream from the app on port 3000 (started by
// checkPorts) event by event at url (Host host when set, headers hdr).
func checkPortSSE(t *testing.T, g *gateway, thread, url, host string, hdr ...string) {
	t.Helper()
	code, body, _ := call(t, "POST", g.URL+"/threads/"+thread+"/v1/file/write",
		map[string]any{"file": "/mnt/user-data/workspace/site/cgi-bin/events", "content": sseScript}, bearer("alice-key")...)
	if code != 200 {
		t.Fatalf("write the CGI script: %d %s", code, body)
	}
	shell(t, g.URL, thread, "chmod +x site/cgi-bin/events && rm -f site/cgi-bin/go*", bearer("alice-key")...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	r.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := g.client.Do(r)
	if err != nil {
		t.Fatalf("SSE: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("SSE: %d %v", resp.StatusCode, resp.Header)
	}
	events := bufio.NewReader(resp.Body)
	for i := 1; i <= 3; i++ {
		line, err := events.ReadString('\n')
		if want := fmt.Sprintf("data: event %d\n", i); err != nil || line != want {
			t.Fatalf("SSE event %d: %q %v, want %q", i, line, err, want)
		}
		_, _ = events.ReadString('\n')
		shell(t, g.URL, thread, fmt.Sprintf("touch site/cgi-bin/go%d", i), bearer("alice-key")...)
	}
}

// startWsecho puts testdata/wsecho into alice's sandbox of thread and
// starts it on port 3002, logging the requests it gets to wsecho.log.
func startWsecho(t *testing.T, g *gateway, thread, wsecho string) {
	t.Helper()
	bin, err := os.ReadFile(wsecho)
	if err != nil {
		t.Fatal(err)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("path", "/mnt/user-data/workspace/wsecho")
	part, _ := mw.CreateFormFile("file", "wsecho")
	_, _ = part.Write(bin)
	_ = mw.Close()
	up, _ := http.NewRequest("POST", g.URL+"/threads/"+thread+"/v1/file/upload", &form)
	up.Header.Set("Content-Type", mw.FormDataContentType())
	up.Header.Set("Authorization", "Bearer alice-key")
	resp, err := g.client.Do(up)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload wsecho: %d", resp.StatusCode)
	}
	shell(t, g.URL, thread, "chmod +x wsecho && (setsid ./wsecho 3002 >wsecho.log 2>&1 </dev/null &)", bearer("alice-key")...)
}

// checkPortWebSocket talks to wsecho (startWsecho) through both routes.
func checkPortWebSocket(t *testing.T, g *gateway, thread, sid string) {
	t.Helper()
	ws := "ws" + strings.TrimPrefix(g.URL, "http")
	hdr := http.Header{"Authorization": {"Bearer alice-key"}}
	for _, rt := range []struct{ name, url, host string }{
		{"path route", ws + "/threads/" + thread + "/ports/3002/hmr", ""},
		{"host route", ws + "/hmr", "3002-" + sid + "." + hostSuffix},
	} {
		echoWebSocket(t, g, rt.name, rt.url, rt.host, hdr)
	}
}

// echoWebSocket dials wsecho at url (Host host when set) and checks two
// echoes.
func echoWebSocket(t *testing.T, g *gateway, name, url, host string, hdr http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPClient: g.client, HTTPHeader: hdr, Host: host}
	var conn *websocket.Conn
	var err error
	// The server may still be starting: a few tries.
	for {
		conn, _, err = websocket.Dial(ctx, url, opts)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%s: WebSocket dial: %v", name, err)
	}
	defer conn.Close(websocket.StatusNormalClosure, "")
	for _, msg := range []string{"one", "two"} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("%s: write: %v", name, err)
		}
		if _, got, err := conn.Read(ctx); err != nil || string(got) != "echo: "+msg {
			t.Errorf("%s: echo of %q: %q %v", name, msg, got, err)
		}
	}
}
