package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// seenRequest is what an app behind the bridge received.
type seenRequest struct {
	method, uri, host, body string
	header                  http.Header
}

// appServer is an application listening on 127.0.0.1, as a dev server
// started in the sandbox would; it returns its port.
func appServer(t *testing.T, h http.Handler) string {
	t.Helper()
	app := httptest.NewServer(h)
	t.Cleanup(app.Close)
	return app.URL[strings.LastIndexByte(app.URL, ':')+1:]
}

// bridgeServer is the sandbox server with a secret, as every backend runs it.
func bridgeServer(t *testing.T) *testServer {
	t.Helper()
	return startServer(t, Config{Secret: testSecret, Env: []string{"HOME=/tmp"}})
}

func secretHeader() http.Header { return http.Header{sandboxspec.SecretHeader: {testSecret}} }

func TestPortBridgeForwards(t *testing.T) {
	t.Parallel()
	seen := make(chan seenRequest, 1)
	port := appServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- seenRequest{r.Method, r.RequestURI, r.Host, string(body), r.Header.Clone()}
		w.Header().Set("X-App", "yes")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "from the app")
	}))
	ts := bridgeServer(t)
	cases := []struct{ name, path, wantURI string }{
		{"path and query", "/a/b?x=1&y=two", "/a/b?x=1&y=two"},
		{"escaped slash kept", "/a%2Fb/c", "/a%2Fb/c"},
		{"root", "/", "/"},
		{"no trailing slash", "", "/"},
		{"double slash not cleaned", "//x", "//x"},
	}
	for _, c := range cases {
		req, err := http.NewRequest(http.MethodPost, ts.URL+sandboxspec.PortPath(port)+c.path, strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = secretHeader()
		for k, v := range map[string]string{"Authorization": "Bearer gw", "X-Api-Key": "gw-key", "Cookie": "sandgate_status=s",
			"X-Aio-Proxy-Port": "22", "X-Forwarded-Host": "3000-sid.sbx.test", "X-Forwarded-Proto": "https", "X-Client": "kept"} {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusTeapot || string(body) != "from the app" || res.Header.Get("X-App") != "yes" {
			t.Fatalf("%s: %d %v %q, want the app's 418", c.name, res.StatusCode, res.Header, body)
		}
		r := <-seen
		if r.method != http.MethodPost || r.uri != c.wantURI || r.body != "payload" || r.host != "127.0.0.1:"+port {
			t.Errorf("%s: app got %s %s (Host %s) %q, want POST %s", c.name, r.method, r.uri, r.host, r.body, c.wantURI)
		}
		for _, h := range []string{sandboxspec.SecretHeader, "Authorization", "X-Api-Key", "Cookie", "X-Aio-Proxy-Port"} {
			if v := r.header.Values(h); len(v) != 0 {
				t.Errorf("%s: %s reached the app: %q", c.name, h, v)
			}
		}
		if r.header.Get("X-Client") != "kept" || r.header.Get("X-Forwarded-Host") != "3000-sid.sbx.test" ||
			r.header.Get("X-Forwarded-Proto") != "https" {
			t.Errorf("%s: headers the app should get: %v", c.name, r.header)
		}
	}
}

func TestPortBridgeRefusesBadPorts(t *testing.T) {
	t.Parallel()
	hit := make(chan struct{}, 1)
	port := appServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit <- struct{}{} }))
	ts := bridgeServer(t)
	for _, bad := range []string{"0", "65536", "99999", "0" + port, "-1", "+80", "abc", "80a", "123456", "%33000"} {
		r := ts.send(t, http.MethodGet, sandboxspec.PortPrefix+bad+"/", secretHeader(), nil)
		if r.Status != http.StatusBadRequest || r.Success || !strings.Contains(r.Message, "port") {
			t.Errorf("port %q: %d %s, want 400 naming the port", bad, r.Status, r.Body)
		}
	}
	if r := ts.send(t, http.MethodGet, sandboxspec.PortPrefix, secretHeader(), nil); r.Status != http.StatusBadRequest {
		t.Errorf("no port: %d %s, want 400", r.Status, r.Body)
	}
	select {
	case <-hit:
		t.Fatal("a refused port reached an app")
	default:
	}
}

func TestPortBridgeNeedsSecret(t *testing.T) {
	t.Parallel()
	hit := make(chan struct{}, 1)
	port := appServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit <- struct{}{} }))
	ts := bridgeServer(t)
	for _, h := range []http.Header{{}, {sandboxspec.SecretHeader: {"wrong"}}, {"Authorization": {"Bearer " + testSecret}}} {
		r := ts.send(t, http.MethodGet, sandboxspec.PortPath(port)+"/", h, nil)
		if r.Status != http.StatusUnauthorized {
			t.Errorf("headers %v: %d %s, want 401", h, r.Status, r.Body)
		}
	}
	select {
	case <-hit:
		t.Fatal("a request without the secret reached the app")
	default:
	}
	req, _ := http.NewRequest(http.MethodGet, ts.URL+sandboxspec.PortPath(port)+"/", nil)
	req.Header = secretHeader()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || len(hit) != 1 {
		t.Fatalf("with the secret: %d, app reached %d times", res.StatusCode, len(hit))
	}
}

// A port nobody listens on is a 502 naming it at once, not a hang.
func TestPortBridgeClosedPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ts := bridgeServer(t)
	start := time.Now()
	r := ts.send(t, http.MethodGet, sandboxspec.PortPath(port)+"/", secretHeader(), nil)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a closed port took %s to answer", took)
	}
	want := "nothing listens on port " + port + " in the sandbox"
	if r.Status != http.StatusBadGateway || r.Message != want || !strings.Contains(r.Body, `"port_closed"`) {
		t.Errorf("closed port: %d %s, want 502 %q", r.Status, r.Body, want)
	}
}

// An SSE stream arrives event by event (the app writes the next only once
// the client has read the last), and counts as activity while open.
func TestPortBridgeStreamsSSE(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	port := appServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			http.NewResponseController(w).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	ts := bridgeServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+sandboxspec.PortPath(port)+"/events", nil)
	req.Header = secretHeader()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewReader(res.Body)
	for i := range 3 {
		line, err := lines.ReadString('\n')
		if want := fmt.Sprintf("data: event %d\n", i); err != nil || line != want {
			t.Fatalf("event %d: %q %v, want %q", i, line, err, want)
		}
		_, _ = lines.ReadString('\n')
		if i == 0 {
			if a := activity(t, ts); a.Requests != 1 {
				t.Errorf("activity with a stream open: %+v, want 1 request", a)
			}
		}
		next <- struct{}{}
	}
	if rest, _ := io.ReadAll(lines); len(rest) != 0 {
		t.Errorf("after the last event: %q", rest)
	}
	eventually(t, 2*time.Second, "the stream's end to leave activity", func() bool { return activity(t, ts).Requests == 0 })
}

func activity(t *testing.T, ts *testServer) sandboxspec.Activity {
	t.Helper()
	r := ts.send(t, http.MethodGet, sandboxspec.ActivityPath, secretHeader(), nil)
	var a sandboxspec.Activity
	if err := json.Unmarshal(r.Data, &a); err != nil {
		t.Fatalf("activity: %d %s", r.Status, r.Body)
	}
	return a
}

func TestPortBridgeWebSocketEcho(t *testing.T) {
	t.Parallel()
	port := appServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	}))
	ts := bridgeServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, _ := url.Parse(ts.URL + sandboxspec.PortPath(port) + "/hmr")
	u.Scheme = "ws"
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: secretHeader()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	for _, msg := range []string{"one", "two", strings.Repeat("x", 30000)} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil || string(got) != "echo: "+msg {
			t.Fatalf("echo of %.10q: %.20q %v", msg, got, err)
		}
	}
	if a := activity(t, ts); a.Requests != 1 {
		t.Errorf("activity with a WebSocket open: %+v, want 1 request", a)
	}
	conn.Close(websocket.StatusNormalClosure, "")
	eventually(t, 2*time.Second, "the closed WebSocket to leave activity", func() bool { return activity(t, ts).Requests == 0 })
}
