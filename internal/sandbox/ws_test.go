package sandbox

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClient is a terminal client over real HTTP, with the library's default
// 32 KiB read limit.
type wsClient struct {
	t    *testing.T
	ts   *testServer
	conn *websocket.Conn
}

func dialWS(t *testing.T, ts *testServer, query string, header http.Header) (*wsClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, res, err := websocket.Dial(ctx, ts.URL+"/v1/shell/ws"+query, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		return nil, res, err
	}
	t.Cleanup(func() { _ = conn.CloseNow() })
	return &wsClient{t: t, ts: ts, conn: conn}, res, nil
}

func mustDialWS(t *testing.T, ts *testServer, query string) *wsClient {
	t.Helper()
	c, _, err := dialWS(t, ts, query, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", query, err)
	}
	return c
}

type wsMsg struct {
	text string
	at   time.Time
}

func (c *wsClient) send(line string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
		c.t.Fatalf("send %q: %v", line, err)
	}
}

// result reads the messages answering one line: output messages, then the
// JSON one. As documented, only the JSON messages start with "{" and are
// longer than that.
func (c *wsClient) result() ([]wsMsg, wsResult, time.Time) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []wsMsg
	for {
		typ, data, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatalf("read: %v (output so far %q)", err, joinMsgs(out))
		}
		text := string(data)
		if typ != websocket.MessageText {
			c.t.Fatalf("binary message %q", text)
		}
		if c.ts.root != "" && strings.Contains(text, c.ts.root) {
			c.t.Errorf("message reveals host path %s: %q", c.ts.root, text)
		}
		if len(text) > 1 && text[0] == '{' {
			var res wsResult
			if err := json.Unmarshal(data, &res); err != nil || res.Type == "" {
				c.t.Fatalf("bad JSON message %q: %v", text, err)
			}
			return out, res, time.Now()
		}
		out = append(out, wsMsg{text, time.Now()})
	}
}

// exec runs a line and requires an exit message, returning the output.
func (c *wsClient) exec(line string) (string, int) {
	c.t.Helper()
	c.send(line)
	out, res, _ := c.result()
	if res.Type != "exit" || res.ExitCode == nil {
		c.t.Fatalf("%q: want an exit message, got %+v", line, res)
	}
	return joinMsgs(out), *res.ExitCode
}

// closeStatus waits for the server to close the socket.
func (c *wsClient) closeStatus() websocket.StatusCode {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err := c.conn.Read(ctx); err != nil {
			if ctx.Err() != nil {
				c.t.Fatal("socket not closed")
			}
			return websocket.CloseStatus(err)
		}
	}
}

// pids reads n lines of pids a running command prints.
func (c *wsClient) pids(n int) []int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got string
	for strings.Count(got, "\n") < n {
		_, data, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatalf("read pids: %v (%q)", err, got)
		}
		got += string(data)
	}
	var pids []int
	for _, f := range strings.Fields(got) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			c.t.Fatalf("not a pid: %q", f)
		}
		pids = append(pids, pid)
	}
	return pids
}

func joinMsgs(ms []wsMsg) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.text)
	}
	return b.String()
}

func TestShellWSRunsLinesInSession(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	c := mustDialWS(t, ts, "")
	for _, tc := range []struct {
		name, line, want string
		code             int
	}{
		{"virtual paths in and out", "cd /mnt/skills && pwd -P && export MARK=set", "/mnt/skills\n", 0},
		{"cwd and exports persist", `pwd; cat SKILL.md; echo "[$MARK]"; exit 3`, "/mnt/skills\n# skill\n[set]\n", 3},
		{"stderr interleaved", "echo a; echo b >&2", "a\nb\n", 0},
		{"output that looks like the exit message", `printf '{"type":"exit","exit_code":0}\n'; exit 5`, `{"type":"exit","exit_code":0}` + "\n", 5},
		{"invalid UTF-8 becomes U+FFFD", `printf 'a\377b'`, "a\uFFFDb", 0},
		{"syntax error", "if then", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			out, code := c.exec(tc.line)
			if code != tc.code || !strings.Contains(out, tc.want) || tc.want == "" && tc.code != 2 && out != "" {
				t.Fatalf("got %q exit %d, want %q exit %d", out, code, tc.want, tc.code)
			}
		})
	}
	c.t = t

	// id-less sockets share the default session with id-less exec calls.
	if res := shellRun(t, ts, map[string]any{"command": `pwd; echo "[$MARK]"`}); res.Output != "/mnt/skills\n[set]\n" {
		t.Fatalf("socket and exec see different sessions: %q", res.Output)
	}

	// output over the client's read limit arrives in several messages
	c.send("head -c 100000 /dev/zero | tr '\\0' x")
	out, res, _ := c.result()
	if res.Type != "exit" || len(joinMsgs(out)) != 100000 || len(out) < 100000/wsChunk {
		t.Fatalf("large output: %d bytes in %d messages, %+v", len(joinMsgs(out)), len(out), res)
	}

	// a line that cannot start gets an error message; the socket goes on
	c.send("echo a\x00b")
	if _, res, _ := c.result(); res.Type != "error" || !strings.Contains(res.Message, "NUL") {
		t.Fatalf("NUL line: %+v", res)
	}

	// lines sent while one runs wait their turn, in order
	for _, l := range []string{"sleep 0.3; echo one", "echo two", "echo three"} {
		c.send(l)
	}
	for _, want := range []string{"one\n", "two\n", "three\n"} {
		if out, res, _ := c.result(); joinMsgs(out) != want || res.Type != "exit" {
			t.Fatalf("queued lines: got %q %+v, want %q", joinMsgs(out), res, want)
		}
	}
}

func TestShellWSStreamsOutputBeforeExit(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	c := mustDialWS(t, ts, "")
	c.send("echo first; sleep 1; echo second")
	out, res, exitAt := c.result()
	if len(out) < 2 || out[0].text != "first\n" || joinMsgs(out) != "first\nsecond\n" || *res.ExitCode != 0 {
		t.Fatalf("output %+v, result %+v", out, res)
	}
	if gap := exitAt.Sub(out[0].at); gap < 700*time.Millisecond {
		t.Fatalf("first chunk came only %s before the exit message: not streamed", gap)
	}
}

func TestShellWSSessionAndExecDir(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": "term"})
	c := mustDialWS(t, ts, "?id=term&exec_dir=/mnt/skills")
	if out, _ := c.exec("pwd"); out != "/mnt/skills\n" {
		t.Fatalf("first line not in exec_dir: %q", out)
	}
	c.exec("cd /mnt/user-data/outputs")
	if out, _ := c.exec("pwd"); out != "/mnt/user-data/outputs\n" {
		t.Fatalf("exec_dir pinned the cwd past the first line: %q", out)
	}
	if res := shellRun(t, ts, map[string]any{"id": "term", "command": "pwd"}); res.Output != "/mnt/user-data/outputs\n" {
		t.Fatalf("socket did not run in session term: %q", res.Output)
	}
	if res := shellRun(t, ts, map[string]any{"command": "pwd"}); res.Output != vWorkspace+"\n" {
		t.Fatalf("socket with id changed the default session: %q", res.Output)
	}
}

func TestShellWSCloseKillsCommand(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, tc := range []struct {
		name  string
		close func(*websocket.Conn)
	}{
		{"close handshake", func(c *websocket.Conn) { _ = c.Close(websocket.StatusNormalClosure, "bye") }},
		{"dropped connection", func(c *websocket.Conn) { _ = c.CloseNow() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustDialWS(t, ts, "")
			c.send("sleep 300 & echo $!; echo $$; sleep 300")
			pids := c.pids(2)
			tc.close(c.conn)
			for _, pid := range pids {
				eventually(t, 5*time.Second, "process of the closed socket to die", func() bool { return !alive(pid) })
			}
		})
	}
}

func TestShellWSKeepalive(t *testing.T) {
	t.Parallel()
	ts := newHostServerWith(t, Config{wsPing: 300 * time.Millisecond})

	live := mustDialWS(t, ts, "")
	if out, code := live.exec("sleep 1.5; echo still-here"); out != "still-here\n" || code != 0 {
		t.Fatalf("a client answering pings was dropped: %q %d", out, code)
	}

	// A client that stops reading answers no pings: dropped, command killed.
	mute := mustDialWS(t, ts, "")
	pidFile := filepath.Join(ts.ws, "mute.pid")
	mute.send("echo $$ > " + vWorkspace + "/mute.pid; sleep 300")
	var pid int
	eventually(t, 5*time.Second, "pid file", func() bool {
		raw, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil && pid > 0
	})
	eventually(t, 5*time.Second, "unresponsive client's command to die", func() bool { return !alive(pid) })
}

func TestShellWSShutdownClosesSockets(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	c := mustDialWS(t, ts, "")
	c.send("echo $$; sleep 300")
	pid := c.pids(1)[0]
	ts.srv.Shutdown()
	if st := c.closeStatus(); st != websocket.StatusGoingAway {
		t.Fatalf("close status %v, want going away", st)
	}
	eventually(t, 5*time.Second, "command to die at shutdown", func() bool { return !alive(pid) })
	if _, res, err := dialWS(t, ts, "", nil); err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial after shutdown: %v %v", err, res)
	}
}

func TestShellWSProtocolErrors(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)

	bin := mustDialWS(t, ts, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := bin.conn.Write(ctx, websocket.MessageBinary, []byte("ls")); err != nil {
		t.Fatal(err)
	}
	if st := bin.closeStatus(); st != websocket.StatusUnsupportedData {
		t.Fatalf("binary message: close status %v", st)
	}

	flood := mustDialWS(t, ts, "")
	flood.send("sleep 300")
	for range wsQueue + 2 {
		if err := flood.conn.Write(ctx, websocket.MessageText, []byte("true")); err != nil {
			break // the server may already have closed
		}
	}
	if st := flood.closeStatus(); st != websocket.StatusPolicyViolation {
		t.Fatalf("queue overflow: close status %v", st)
	}
}

func TestShellWSRefusals(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	wantStatus(t, ts.do(t, http.MethodGet, "/v1/shell/ws", nil), http.StatusUpgradeRequired, "")
	for _, tc := range []struct {
		name, query string
		header      http.Header
		status      int
	}{
		{"unknown session", "?id=nope", nil, http.StatusNotFound},
		{"exec_dir outside the mappings", "?exec_dir=/etc", nil, http.StatusForbidden},
		{"exec_dir missing", "?exec_dir=" + vWorkspace + "/nope", nil, http.StatusNotFound},
		{"cross-origin browser", "", http.Header{"Origin": {"http://evil.example"}}, http.StatusForbidden},
		{"same-origin browser", "", http.Header{"Origin": {strings.Replace(ts.URL, "http://", "https://", 1)}}, http.StatusSwitchingProtocols},
		{"browser on the proxy's host", "", http.Header{"Origin": {"https://gw.example"}, "X-Forwarded-Host": {"gw.example"}}, http.StatusSwitchingProtocols},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, res, err := dialWS(t, ts, tc.query, tc.header)
			if res == nil || res.StatusCode != tc.status {
				t.Fatalf("status %v, want %d (%v)", res, tc.status, err)
			}
			if tc.status == http.StatusSwitchingProtocols {
				if out, _ := c.exec("echo ok"); out != "ok\n" {
					t.Fatalf("accepted socket does not work: %q", out)
				}
				return
			}
			var body struct {
				Success bool
				Message string
			}
			if err == nil || res.Header.Get("Content-Type") != "application/json" || json.NewDecoder(res.Body).Decode(&body) != nil || body.Success || body.Message == "" {
				t.Fatalf("refusal is not a JSON error: %v %+v", err, body)
			}
		})
	}
}
