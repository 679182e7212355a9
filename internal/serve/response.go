package serve

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the http.ResponseWriter of a connection's current request,
// reused from request to request. The body collects in buf; the head goes
// out with the first write(2): at the end of the handler when the body fit
// (then with its Content-Length), else when buf overflows or the handler
// flushes (then chunked, unless the handler set a Content-Length).
type response struct {
	c           *conn
	req         *http.Request
	header      http.Header
	status      int
	wroteHeader bool
	committed   bool // the head is on the wire
	chunked     bool
	isHead      bool
	http10      bool
	closeAfter  bool // the connection ends after this response
	hijacked    bool
	declared    int64 // the handler's Content-Length; -1 none
	written     int64 // body bytes the handler wrote
	buf         []byte
	out         []byte // the head, a chunk's size line and, for a small body, the body: one write
	tail        []byte // a chunk's CRLF and the last chunk
	vec         net.Buffers
	vecArr      [3][]byte
}

func (w *response) reset(r *http.Request, h *head) {
	if w.header == nil || w.hijacked {
		w.header = make(http.Header, 8)
	} else {
		clear(w.header)
	}
	w.req, w.status = r, 0
	w.wroteHeader, w.committed, w.chunked, w.hijacked = false, false, false, false
	w.isHead, w.http10, w.closeAfter = h.method == http.MethodHead, h.minor == 0, h.close
	w.declared, w.written = -1, 0
	w.buf = w.buf[:0]
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.hijacked || w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		// Informational: sent at once, the final status still to come.
		w.out = w.appendStatus(w.out[:0], code)
		w.out = w.appendFields(w.out)
		w.out = append(w.out, "\r\n"...)
		_, _ = w.c.rwc.Write(w.out)
		return
	}
	w.wroteHeader, w.status = true, code
	if v := w.header.Get("Content-Length"); v != "" {
		if n, ok := parseLength(v); ok {
			w.declared = n
		} else {
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.isHead {
		return len(p), nil
	}
	if len(w.buf)+len(p) <= cap(w.buf) {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush sends the head and what the body holds (each Flush of an SSE
// stream is one write).
func (w *response) Flush() { _ = w.FlushError() }

func (w *response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.committed && len(w.buf) == 0 {
		return nil
	}
	return w.send(nil, false)
}

// finish ends the response when the handler returns.
func (w *response) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.declared >= 0 && w.written < w.declared && !w.isHead && bodyAllowed(w.status) {
		w.closeAfter = true // the client waits for bytes that never come
	}
	if w.c.s.shutdown.Load() {
		w.closeAfter = true
	}
	if w.committed && len(w.buf) == 0 && !w.chunked {
		return nil
	}
	return w.send(nil, true)
}

// send writes what is due in one write(2): the head if not yet sent, the
// buffered body and p as one chunk (or as they are), and the last chunk
// when final.
func (w *response) send(p []byte, final bool) error {
	out := w.out[:0]
	if !w.committed {
		out = w.appendHead(out, final, p)
		w.committed = true
	}
	n := len(w.buf) + len(p)
	if w.chunked && n > 0 {
		out = strconv.AppendInt(out, int64(n), 16)
		out = append(out, "\r\n"...)
	}
	out = append(out, w.buf...)
	w.buf = w.buf[:0]
	tail := w.tail[:0]
	if w.chunked {
		if n > 0 {
			tail = append(tail, "\r\n"...)
		}
		if final {
			tail = append(tail, "0\r\n"...)
			tail = w.appendTrailers(tail)
			tail = append(tail, "\r\n"...)
		}
	}
	w.out, w.tail = out, tail
	var err error
	if len(p) == 0 {
		w.out = append(out, tail...)
		_, err = w.c.rwc.Write(w.out)
	} else {
		err = w.writeVec(out, p, tail)
	}
	if err != nil {
		w.closeAfter = true
	}
	return err
}

// writeVec writes the segments that are not empty in one system call:
// writev on the TCP connection itself (c.vw). Given a writer without
// writev, a limitedConn among them, net.Buffers makes a write of each
// segment, empty ones included: a chunk of a large body after the first,
// with no head and no chunk framing, took three writes for one.
func (w *response) writeVec(segs ...[]byte) error {
	w.vec = w.vecArr[:0]
	for _, b := range segs {
		if len(b) > 0 {
			w.vec = append(w.vec, b)
		}
	}
	if len(w.vec) == 1 {
		_, err := w.c.rwc.Write(w.vec[0])
		return err
	}
	_, err := w.vec.WriteTo(w.c.vw)
	return err
}

// appendHead appends the status line and header fields, with the framing
// chosen now: a Content-Length when the whole body is known (final), the
// handler's, chunked for HTTP/1.1, else the end of the connection.
func (w *response) appendHead(b []byte, final bool, p []byte) []byte {
	h := w.header
	delete(h, "Transfer-Encoding")
	bodyOK := bodyAllowed(w.status)
	if !bodyOK {
		delete(h, "Content-Length")
	}
	var length int64 = -1
	switch {
	case !bodyOK || w.declared >= 0:
	case final && (!w.isHead || w.written > 0):
		length = w.written
	case final || w.isHead:
	case !w.http10:
		w.chunked = true
	default:
		w.closeAfter = true
	}
	if v, ok := h["Connection"]; ok && len(v) > 0 && strings.EqualFold(v[0], "close") {
		w.closeAfter = true
	}
	b = w.appendStatus(b, w.status)
	if _, ok := h["Content-Type"]; !ok && bodyOK && (len(w.buf) > 0 || len(p) > 0) {
		sniff := w.buf
		if len(sniff) == 0 {
			sniff = p
		}
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(sniff)...)
		b = append(b, "\r\n"...)
	}
	b = w.appendFields(b)
	if _, ok := h["Date"]; !ok {
		b = append(b, "Date: "...)
		b = append(b, date()...)
		b = append(b, "\r\n"...)
	}
	if length >= 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, length, 10)
		b = append(b, "\r\n"...)
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if _, ok := h["Connection"]; !ok {
		switch {
		case w.closeAfter:
			b = append(b, "Connection: close\r\n"...)
		case w.http10:
			b = append(b, "Connection: keep-alive\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

func (w *response) appendStatus(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	return append(b, "\r\n"...)
}

// appendFields appends the handler's header fields; a value's CR and LF
// become spaces (no header injection), invalid names and trailers are left
// out.
func (w *response) appendFields(b []byte) []byte { return AppendFields(b, w.header, nil) }

// AppendFields appends h's fields to a head, each value by AppendField; a
// name that is no token is dropped (it could carry a field of its own), and
// so is one skip reports (nil: none).
func AppendFields(b []byte, h http.Header, skip func(name string) bool) []byte {
	for k, vv := range h {
		if !IsToken(k) || skip != nil && skip(k) {
			continue
		}
		for _, v := range vv {
			b = AppendField(b, k, v)
		}
	}
	return b
}

// AppendField appends the field "k: v" and its CRLF to a head: v without
// leading or trailing blanks, any CR or LF in it a space (no field can end
// early and start a forged one). k must be a token (IsToken).
func AppendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	start := len(b)
	b = append(b, strings.Trim(v, " \t")...)
	for i := start; i < len(b); i++ {
		if b[i] == '\r' || b[i] == '\n' {
			b[i] = ' '
		}
	}
	return append(b, "\r\n"...)
}

// appendTrailers appends the trailer fields: those the Trailer header
// announced, and those set under http.TrailerPrefix.
func (w *response) appendTrailers(b []byte) []byte {
	for _, names := range w.header["Trailer"] {
		for k := range strings.SplitSeq(names, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			for _, v := range w.header[k] {
				b = AppendField(b, k, v)
			}
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && IsToken(name) {
			for _, v := range vv {
				b = AppendField(b, name, v)
			}
		}
	}
	return b
}

// Hijack hands the connection to the handler (WebSocket upgrades): the
// server forgets it, and Shutdown no longer waits for it.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.wroteHeader {
		if err := w.FlushError(); err != nil {
			return nil, nil, err
		}
	}
	c := w.c
	c.stopWatch()
	w.hijacked = true
	c.state.Store(stateHijacked)
	c.s.remove(c)
	if c.hasPending { // the watch took the first byte: the reader hands it on
		_, _ = c.br.Peek(1)
	}
	return c.rwc, bufio.NewReadWriter(c.br, bufio.NewWriter(c.rwc)), nil
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.rwc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// EnableFullDuplex is http.ResponseController's: a handler may always read
// the body while it writes here.
func (w *response) EnableFullDuplex() error { return nil }

func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// dateCache holds the Date header's value for the current second.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec  int64
	text string
}

func date() string {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.text
	}
	d := &dateValue{sec: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.text
}
