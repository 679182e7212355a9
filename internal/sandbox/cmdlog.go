package sandbox

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The command log (sandboxspec.CommandsPath): every command that ends,
// whichever API started it (shell, bash, code, the WebSocket terminal),
// becomes a sandboxspec.CommandRecord, kept in a ring of the last
// sandboxspec.MaxCommandRecords and written to the server's log as one
// "command ended" line. A record holds sizes and a bounded command text,
// never output: a command that prints gigabytes costs the log what one
// that prints nothing does. The log line leaves the text out: a log is
// written to disk, shipped and kept, and a command line carries whatever
// its agent typed, API keys included. The text stays in the ring, which
// lives and dies with the server and is read only with the sandbox's
// secret; the gateway's operator log route puts it back into the lines it
// streams (router/adminlogs.go).

// cmdLog is the ring. Records are made when a command ends, so the ring
// holds ended commands only, in the order they ended.
type cmdLog struct {
	mu      sync.Mutex
	ring    [sandboxspec.MaxCommandRecords]sandboxspec.CommandRecord
	next    uint64 // seq of the next record; records 1..next-1 were made
	dropped uint64
}

func (l *cmdLog) add(rec sandboxspec.CommandRecord) sandboxspec.CommandRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	rec.Seq = l.next
	if l.next > sandboxspec.MaxCommandRecords {
		l.dropped++
	}
	l.ring[(l.next-1)%sandboxspec.MaxCommandRecords] = rec
	return rec
}

// last returns the last n records (n <= 0: all kept), oldest first.
func (l *cmdLog) last(n int) sandboxspec.CommandLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := int(min(l.next, sandboxspec.MaxCommandRecords))
	if n <= 0 || n > kept {
		n = kept
	}
	out := sandboxspec.CommandLog{Records: make([]sandboxspec.CommandRecord, 0, n), Dropped: l.dropped}
	for seq := l.next - uint64(n) + 1; seq <= l.next; seq++ {
		out.Records = append(out.Records, l.ring[(seq-1)%sandboxspec.MaxCommandRecords])
	}
	return out
}

// boundedCommand cuts text to sandboxspec.MaxRecordedCommand bytes, on a
// UTF-8 boundary.
func boundedCommand(text string) string {
	if len(text) <= sandboxspec.MaxRecordedCommand {
		return text
	}
	cut := sandboxspec.MaxRecordedCommand
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

// recordEnded records c, which has ended (its state is final), started at
// start for who.
func (s *Server) recordEnded(c *command, who string, start time.Time) {
	status, code := c.state()
	rec := sandboxspec.CommandRecord{CommandID: c.id, SessionID: c.session, Command: boundedCommand(c.text),
		CommandBytes: len(c.text), Who: who, Status: status, StartedAt: start.UTC(),
		DurationMS: time.Since(start).Milliseconds()}
	if code != nil {
		rec.ExitCode = *code
	}
	for _, b := range c.streams {
		rec.OutputBytes += b.size()
	}
	rec = s.cmdlog.add(rec)
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "command ended", slog.Uint64("seq", rec.Seq),
		slog.String("command_id", rec.CommandID), slog.String("session_id", rec.SessionID),
		slog.Int("command_bytes", rec.CommandBytes), slog.String("who", rec.Who),
		slog.String("status", rec.Status), slog.Int("exit_code", rec.ExitCode),
		slog.Int64("duration_ms", rec.DurationMS), slog.Int64("output_bytes", rec.OutputBytes))
}

// handleCommands answers sandboxspec.CommandsPath.
func (s *Server) handleCommands(w http.ResponseWriter, r *http.Request) error {
	n := 0
	if v := r.URL.Query().Get(sandboxspec.CommandsLimitParam); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			return statusErr(http.StatusBadRequest, "limit: want a non-negative number of records")
		}
	}
	ok(w, "ok", s.cmdlog.last(n))
	return nil
}

// maxCaller bounds the caller a record keeps: the gateway sends a user
// name, but anyone holding the secret may send anything.
const maxCaller = 256

// callerOf is who sent r (sandboxspec.CallerHeader), bounded.
func callerOf(r *http.Request) string {
	who := r.Header.Get(sandboxspec.CallerHeader)
	if len(who) > maxCaller {
		who = who[:maxCaller]
	}
	return who
}
