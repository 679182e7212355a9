package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// adminLogs is GET /admin/v1/sandboxes/{id}/logs[?follow=true&tail=N]:
// the sandbox server's output as text, flushed as it comes, with each
// "command ended" line given back the command's text (commandTexts).
func (rt *Router) adminLogs(c echo.Context, _ *auth.Principal) error {
	if rt.admin == nil {
		return backend.ErrNotSupported
	}
	sid := c.Param("id")
	if !identity.ValidSandboxID(sid) {
		return errBadSandboxID
	}
	opts := backend.LogOptions{Follow: c.QueryParam("follow") == "true" || c.QueryParam("follow") == "1"}
	if t := c.QueryParam("tail"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			return errBadTail
		}
		opts.Tail = n
	}
	ctx := c.Request().Context()
	rc, err := rt.admin.Logs(ctx, sid, opts)
	if err != nil {
		return err
	}
	defer rc.Close()
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Flush()
	texts := commandTexts{read: func(ctx context.Context) (sandboxspec.CommandLog, error) {
		return rt.admin.Commands(ctx, sid, 0)
	}}
	in := bufio.NewReaderSize(rc, 32<<10)
	for {
		line, err := in.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			err = nil // a longer line goes through in pieces, untouched
		} else if len(line) > 0 {
			line = texts.fill(ctx, line)
		}
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return nil // the client left
			}
			if in.Buffered() == 0 {
				w.Flush()
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				rt.log.WarnContext(ctx, "sandbox log stream ended", "sandbox_id", sid, "err", err)
			}
			return nil
		}
	}
}

// commandTexts puts the command's text back into a sandbox server's
// "command ended" log lines, which leave it out (sandbox/cmdlog.go), from
// the server's command log, read once and again only for a line newer
// than the last read. A line whose record has left the ring, or that
// belongs to an earlier server (the seq and id disagree), stays as it is;
// so do all lines after a failed read (a frozen server does not answer,
// and the stream must not wait on it line after line).
type commandTexts struct {
	read   func(context.Context) (sandboxspec.CommandLog, error)
	byseq  map[uint64]sandboxspec.CommandRecord
	last   uint64 // the newest seq read
	tried  bool
	failed bool
}

// endedMark is how a "command ended" line is told from the others
// without decoding every line.
var endedMark = []byte(`"msg":"command ended"`)

// fill returns line with its command's text, or line as it is.
func (t *commandTexts) fill(ctx context.Context, line []byte) []byte {
	if !bytes.Contains(line, endedMark) {
		return line
	}
	var ended struct {
		Seq       uint64  `json:"seq"`
		CommandID string  `json:"command_id"`
		Command   *string `json:"command"`
	}
	body := bytes.TrimRight(line, "\r\n")
	if t.failed || json.Unmarshal(body, &ended) != nil || ended.Command != nil || !bytes.HasSuffix(body, []byte("}")) {
		return line
	}
	if !t.tried || ended.Seq > t.last {
		t.load(ctx)
	}
	rec, ok := t.byseq[ended.Seq]
	if !ok || rec.CommandID != ended.CommandID {
		return line
	}
	text, err := json.Marshal(rec.Command)
	if err != nil {
		return line
	}
	out := make([]byte, 0, len(line)+len(text)+16)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"command":`...)
	out = append(out, text...)
	out = append(out, '}')
	return append(out, line[len(body):]...)
}

// load reads the server's command log.
func (t *commandTexts) load(ctx context.Context) {
	t.tried = true
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	log, err := t.read(ctx)
	if err != nil {
		t.failed = true
		return
	}
	t.byseq = make(map[uint64]sandboxspec.CommandRecord, len(log.Records))
	for _, rec := range log.Records {
		t.byseq[rec.Seq] = rec
		t.last = max(t.last, rec.Seq)
	}
}
