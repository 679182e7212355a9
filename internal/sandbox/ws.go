package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// WebSocket terminal: GET /v1/shell/ws?id=SESSION&exec_dir=DIR.
//
// Each text message from the client is one command line, run in the session
// (without id, the default session) as shell/exec runs it: virtual paths
// mapped in, host paths mapped out, cwd and exports carried to the next
// line. The server answers each line with text messages: its output (stdout
// and stderr interleaved) as it is produced, then {"type":"exit",
// "exit_code":N}, or {"type":"error","message":"..."} if the line could not
// be started. An output message never starts with "{" unless it is exactly
// "{", so it cannot pass for those two. Lines sent while a command runs
// wait their turn. exec_dir moves the session there as the socket opens,
// as a `cd` would.
//
// The server pings every 15 s and drops a peer that does not answer within
// as long; when the socket closes, its running command's process group is
// killed and queued lines are dropped. Server shutdown closes every socket
// with 1001 (going away).

const (
	wsPingEvery = 15 * time.Second
	wsMaxLine   = 1 << 20 // bytes in one command line
	wsQueue     = 64      // lines waiting behind a running command
	// wsChunk bounds an output message, under the 32 KiB read limit common
	// WebSocket clients (coder/websocket among them) default to.
	wsChunk = 16 << 10
)

// wsResult is the JSON message that ends a command line.
type wsResult struct {
	Type     string `json:"type"` // exit | error
	ExitCode *int   `json:"exit_code,omitempty"`
	Message  string `json:"message,omitempty"`
}

func (s *Server) handleShellWS(w http.ResponseWriter, r *http.Request) error {
	if s.closing.Load() {
		return statusErr(http.StatusServiceUnavailable, "sandbox server is shutting down")
	}
	if !originAllowed(r) {
		return statusErr(http.StatusForbidden, "cross-origin WebSocket refused")
	}
	q := r.URL.Query()
	t := &terminal{srv: s, sessionID: q.Get("id")}
	sess, found := s.sessions.byID(t.sessionID, s.homeHost, s.baseEnv)
	if !found {
		return statusErr(http.StatusNotFound, "unknown session: %s (query id)", t.sessionID)
	}
	dir := ""
	if execDir := q.Get("exec_dir"); execDir != "" {
		var err error
		if dir, err = s.hostDir("exec_dir", execDir); err != nil {
			return err
		}
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		return statusErr(http.StatusUpgradeRequired, "GET /v1/shell/ws needs a WebSocket upgrade")
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // origin checked above
	if err != nil {
		return nil // Accept has answered the client
	}
	conn.SetReadLimit(wsMaxLine)
	if dir != "" {
		sess.chdir(dir)
	}
	t.conn = conn
	t.serve(s.stop)
	return nil
}

// headerHasToken reports whether a comma-separated header holds token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, part := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// originAllowed admits clients without an Origin (not browsers) and
// browsers on the sandbox's own host or on the host a proxy in front
// forwarded (X-Forwarded-Host, which a page cannot set), so no web page can
// drive a shell on a sandbox server it happens to reach.
func originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, h := range strings.Split(r.Header.Get("X-Forwarded-Host"), ",") {
		if strings.EqualFold(u.Host, strings.TrimSpace(h)) {
			return true
		}
	}
	return false
}

// terminal is one WebSocket terminal connection.
type terminal struct {
	srv       *Server
	conn      *websocket.Conn
	sessionID string // "" = the default session
}

// serve runs the socket's command lines one after another until the peer
// goes away or stop (server shutdown) ends.
func (t *terminal) serve(stop context.Context) {
	// ioCtx bounds reads for the socket's life; ctx ends the session early.
	ioCtx, ioCancel := context.WithCancel(context.Background())
	defer ioCancel()
	ctx, cancel := context.WithCancel(stop)
	defer cancel()
	lines := make(chan string, wsQueue)
	go t.read(ioCtx, cancel, lines)
	go t.keepalive(ctx, cancel)
	for ctx.Err() == nil {
		select {
		case line := <-lines:
			if ctx.Err() == nil {
				t.run(ctx, line)
			}
		case <-ctx.Done():
		}
	}
	if stop.Err() != nil {
		_ = t.conn.Close(websocket.StatusGoingAway, "sandbox server shutting down")
		return
	}
	_ = t.conn.CloseNow()
}

// read queues the peer's command lines; it ends the session when the peer
// closes or breaks the protocol.
func (t *terminal) read(ctx context.Context, done context.CancelFunc, lines chan<- string) {
	defer done()
	for {
		typ, data, err := t.conn.Read(ctx)
		if err != nil {
			return // the library has answered a close or failed the socket
		}
		if typ != websocket.MessageText {
			_ = t.conn.Close(websocket.StatusUnsupportedData, "send command lines as text messages")
			return
		}
		select {
		case lines <- string(data):
		default:
			_ = t.conn.Close(websocket.StatusPolicyViolation, "too many command lines queued")
			return
		}
	}
}

// keepalive pings the peer and ends the session when a pong is late:
// a vanished peer must not leave its command running.
func (t *terminal) keepalive(ctx context.Context, done context.CancelFunc) {
	every := t.srv.wsPing
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := t.conn.Ping(pctx)
		cancel()
		if err != nil {
			done()
			return
		}
	}
}

// run executes one line, streaming its output; if ctx ends first, the
// command's process group is killed.
func (t *terminal) run(ctx context.Context, line string) {
	_, c, err := t.srv.startExec(execReq{sessionID: t.sessionID, command: line}, "id")
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{msg: "could not start the command", err: err}
		}
		if ae.err != nil {
			t.srv.log.Error("shell websocket: command not started", "error", ae.err)
		}
		t.send(ctx, wsResult{Type: "error", Message: ae.msg})
		return
	}
	out := newCursor(c)
	for {
		changed := c.changed.wait()
		t.output(ctx, out.next(false))
		select {
		case <-changed:
			continue
		case <-ctx.Done():
			c.kill(statusTerminated)
			return
		case <-c.done:
		}
		break
	}
	t.output(ctx, out.next(true))
	_, code := c.state()
	t.send(ctx, wsResult{Type: "exit", ExitCode: code})
}

func (t *terminal) output(ctx context.Context, chunks [][]byte) {
	for _, chunk := range chunks {
		for _, m := range outputMessages(chunk) {
			_ = t.conn.Write(ctx, websocket.MessageText, []byte(m))
		}
	}
}

func (t *terminal) send(ctx context.Context, res wsResult) {
	data, _ := json.Marshal(res)
	_ = t.conn.Write(ctx, websocket.MessageText, data)
}

// outputMessages splits output into text messages: valid UTF-8 (invalid
// bytes become U+FFFD), at most wsChunk bytes, none starting with "{" but
// "{" itself.
func outputMessages(chunk []byte) []string {
	s := strings.ToValidUTF8(string(chunk), "\uFFFD")
	var out []string
	for s != "" {
		n := min(len(s), wsChunk)
		switch {
		case s[0] == '{':
			n = 1
		case n < len(s):
			for !utf8.RuneStart(s[n]) {
				n--
			}
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
