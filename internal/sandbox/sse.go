package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
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
// with new bytes. Unless final, an incomplete UTF-8 sequence at the end
// waits for its remaining bytes.
func (cu *cursor) next(final bool) [][]byte {
	var out [][]byte
	for i, b := range cu.c.streams {
		chunk, next := b.readFrom(cu.offs[i])
		if !final {
			k := incompleteSuffix(chunk)
			chunk, next = chunk[:len(chunk)-k], next-int64(k)
		}
		cu.offs[i] = next
		if len(chunk) > 0 {
			out = append(out, chunk)
		}
	}
	return out
}

func (e *sseStream) event(name string, v any) {
	data, _ := json.Marshal(v)
	_, _ = fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, data)
	_ = e.rc.Flush()
}

func (e *sseStream) ping() {
	_, _ = fmt.Fprint(e.w, ": ping\n\n")
	_ = e.rc.Flush()
}

// pump sends the output written since the last pump.
func (e *sseStream) pump(final bool) {
	for _, chunk := range e.out.next(final) {
		e.event("output", map[string]string{"output": string(chunk)})
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

// streamCommand serves a command as an SSE stream.
func streamCommand(w http.ResponseWriter, r *http.Request, sessID string, c *command, o awaitOpts) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sseStream{w: w, rc: http.NewResponseController(w), out: newCursor(c)}
	e.event("start", map[string]string{"session_id": sessID, "command_id": c.id, "command": c.text})
	st := await(r.Context(), c, o, e)
	e.pump(st != statusRunning && st != statusNoChange)
	e.event("result", envelope{Success: true, Message: statusMessage(st, o), Data: shellResultOf(sessID, c, st)})
}
