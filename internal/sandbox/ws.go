package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
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
	// wsWriteTimeout drops a peer that takes no message for this long.
	wsWriteTimeout = 30 * time.Second
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
	q := r.URL.Query()
	t := &terminal{srv: s, sessionID: q.Get("id"), who: callerOf(r)}
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
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // Handler refused cross-site origins (guard.go)
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

// terminal is one WebSocket terminal connection.
type terminal struct {
	srv       *Server
	conn      *websocket.Conn
	sessionID string // "" = the default session
	who       string // the caller of the upgrade, for the command log
	// ioCtx bounds socket I/O. It outlives the session's ctx on purpose: the
	// library fails the socket when an I/O context ends, which would race
	// the close frame that shutdown sends.
	ioCtx context.Context
}

// serve runs the socket's command lines one after another until the peer
// goes away or stop (server shutdown) ends.
func (t *terminal) serve(stop context.Context) {
	ioCtx, ioDone := context.WithCancel(context.Background())
	defer ioDone()
	t.ioCtx = ioCtx
	ctx, cancel := context.WithCancel(stop)
	defer cancel()
	lines := make(chan string, wsQueue)
	go t.read(cancel, lines)
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
func (t *terminal) read(done context.CancelFunc, lines chan<- string) {
	defer done()
	for {
		typ, data, err := t.conn.Read(t.ioCtx)
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
		pctx, cancel := context.WithTimeout(t.ioCtx, every)
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
	_, c, err := t.srv.startExec(execReq{sessionID: t.sessionID, command: line, who: t.who}, "id")
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{msg: "could not start the command", err: err}
		}
		if ae.err != nil {
			t.srv.log.Error("shell websocket: command not started", "error", ae.err)
		}
		t.send(wsResult{Type: "error", Message: ae.msg})
		return
	}
	out := newCursor(c)
	for {
		changed := c.changed.wait()
		t.output(out.next(false))
		select {
		case <-changed:
			continue
		case <-ctx.Done():
			_, _ = c.kill(statusTerminated) // the client is gone: nobody to tell
			return
		case <-c.done:
		}
		break
	}
	t.output(out.next(true))
	_, code := c.state()
	t.send(wsResult{Type: "exit", ExitCode: code})
}

func (t *terminal) output(chunks [][]byte) {
	for _, chunk := range chunks {
		for _, m := range outputMessages(chunk) {
			t.write([]byte(m))
		}
	}
}

func (t *terminal) send(res wsResult) {
	data, _ := json.Marshal(res)
	t.write(data)
}

// write sends a text message. A failed write has failed the socket, which
// the reader notices and ends the session.
func (t *terminal) write(msg []byte) {
	ctx, cancel := context.WithTimeout(t.ioCtx, wsWriteTimeout)
	defer cancel()
	_ = t.conn.Write(ctx, websocket.MessageText, msg)
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
