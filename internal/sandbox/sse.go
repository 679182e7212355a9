package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// sseHeartbeat keeps idle streams alive through proxies.
const sseHeartbeat = 15 * time.Second

// SSE (Accept: text/event-stream on /v1/shell/exec and /v1/shell/view).
// Events, each flushed as soon as it is written:
//
//	event: start   data: {"session_id", "command_id", "command"}
//	event: output  data: {"output": "<chunk>"}   as the command writes (stdout and stderr interleaved)
//	event: result  data: the full JSON envelope, exactly as the non-streaming response
//
// plus ": ping" comment lines every 15 s of silence. Chunks never split a
// UTF-8 character. If a reader falls behind by more than the output cap, the
// skipped bytes arrive as the truncation marker inside an output event.
//
// Every event has an id (eventID): the command and how far into each of its
// output streams the reader is once it has that event. A client whose
// stream broke (its gateway replica died, say: the command runs on in the
// sandbox) sends the last id it saw as Last-Event-ID, on a re-sent
// shell/exec or on shell/view, and the stream resumes there: start, the
// output it missed, then live output and result. A re-sent exec with the
// header never starts the command again.
type sseStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	out *cursor
}

// cursor follows a command's output streams from where its reader left off
// (SSE and the WebSocket terminal).
type cursor struct {
	c    *command
	offs []int64
}

func newCursor(c *command) *cursor { return &cursor{c: c, offs: make([]int64, len(c.streams))} }

// next returns the output written since the last call, a chunk per stream
// with new bytes.
func (cu *cursor) next(final bool) [][]byte {
	var out [][]byte
	for i := range cu.offs {
		if chunk := cu.nextOf(i, final); len(chunk) > 0 {
			out = append(out, chunk)
		}
	}
	return out
}

// nextOf returns stream i's output since the last call. Unless final, an
// incomplete UTF-8 sequence at the end waits for its remaining bytes.
func (cu *cursor) nextOf(i int, final bool) []byte {
	chunk, next := cu.c.streams[i].readFrom(cu.offs[i])
	if !final {
		k := incompleteSuffix(chunk)
		chunk, next = chunk[:len(chunk)-k], next-int64(k)
	}
	cu.offs[i] = next
	return chunk
}

// eventID is "<command id>:<offset>[.<offset>]", a byte offset per output
// stream. Command ids are UUIDs (no ':' or '.'), so the form is unambiguous.
func eventID(commandID string, offs []int64) string {
	b := make([]byte, 0, len(commandID)+1+20*len(offs))
	b = append(append(b, commandID...), ':')
	for i, off := range offs {
		if i > 0 {
			b = append(b, '.')
		}
		b = strconv.AppendInt(b, off, 10)
	}
	return string(b)
}

// parseEventID reads a Last-Event-ID. Only the canonical form eventID
// writes is accepted (no signs, leading zeros or spaces), so one position
// has one id.
func parseEventID(id string) (string, []int64, error) {
	bad := statusErr(http.StatusBadRequest, "Last-Event-ID: not an event id of this server: %.100q", id)
	cmd, rest, found := strings.Cut(id, ":")
	if !found || cmd == "" || len(cmd) > 64 || strings.Trim(cmd, "0123456789abcdef-") != "" {
		return "", nil, bad
	}
	parts := strings.Split(rest, ".")
	if len(parts) > 2 { // a command has one stream, or two (stdout, stderr)
		return "", nil, bad
	}
	offs := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return "", nil, bad
		}
		offs[i] = n
	}
	if eventID(cmd, offs) != id {
		return "", nil, bad
	}
	return cmd, offs, nil
}

// resumeCursor finds the command a Last-Event-ID names (in session
// sessID, unless that is "") and a cursor at its offsets.
func (s *Server) resumeCursor(lastID, sessID string) (*session, *cursor, error) {
	cmdID, offs, err := parseEventID(lastID)
	if err != nil {
		return nil, nil, err
	}
	sess, c := s.sessions.command(cmdID)
	if c == nil || sessID != "" && sess.id != sessID {
		return nil, nil, statusErr(http.StatusNotFound, "unknown command: %s (Last-Event-ID); a session keeps its latest and its running commands", cmdID)
	}
	if len(offs) != len(c.streams) {
		return nil, nil, statusErr(http.StatusBadRequest, "Last-Event-ID: command %s has %d output stream(s), the id names %d", cmdID, len(c.streams), len(offs))
	}
	for i, off := range offs {
		if off > c.streams[i].size() {
			return nil, nil, statusErr(http.StatusBadRequest, "Last-Event-ID: offset %d is past the output of command %s", off, cmdID)
		}
	}
	return sess, &cursor{c: c, offs: offs}, nil
}

func (e *sseStream) event(name string, v any) {
	data, _ := json.Marshal(v)
	_, _ = fmt.Fprintf(e.w, "event: %s\nid: %s\ndata: %s\n\n", name, eventID(e.out.c.id, e.out.offs), data)
	_ = e.rc.Flush()
}

func (e *sseStream) ping() {
	_, _ = fmt.Fprint(e.w, ": ping\n\n")
	_ = e.rc.Flush()
}

// pump sends the output written since the last pump, an event per stream
// with new bytes, so each event's id holds the offsets right after it.
func (e *sseStream) pump(final bool) {
	for i := range e.out.offs {
		if chunk := e.out.nextOf(i, final); len(chunk) > 0 {
			e.event("output", map[string]string{"output": string(chunk)})
		}
	}
}

// incompleteSuffix is the length of a truncated UTF-8 sequence ending b.
func incompleteSuffix(b []byte) int {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// streamCommand serves a command as an SSE stream from where out stands
// (the start, or a resumed stream's Last-Event-ID).
func streamCommand(w http.ResponseWriter, r *http.Request, sessID string, out *cursor, o awaitOpts) {
	c := out.c
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sseStream{w: w, rc: http.NewResponseController(w), out: out}
	e.event("start", map[string]string{"session_id": sessID, "command_id": c.id, "command": c.text})
	st := await(r.Context(), c, o, e)
	e.pump(st != statusRunning && st != statusNoChange)
	e.event("result", envelope{Success: true, Message: statusMessage(st, o), Data: shellResultOf(sessID, c, st)})
}
