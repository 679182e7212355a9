package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hangupAfter is how long a handler runs before its connection is watched
// for a client that hangs up (which cancels the request's context). Below
// it a request costs no goroutine and no syscall for the watch; a request
// that ends sooner than this has nothing to cancel worth the cost.
const hangupAfter = 100 * time.Millisecond

// Connection states, for Shutdown: only an idle connection is closed.
const (
	stateActive int32 = iota
	stateIdle
	stateClosed
	stateHijacked
)

const (
	readBufSize  = 4 << 10
	writeBufSize = 8 << 10
)

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writes  = sync.Pool{New: func() any { b := make([]byte, 0, writeBufSize); return &b }}
)

// aLongTimeAgo is a deadline in the past: it aborts a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// conn is one client connection; its fields are the serving goroutine's
// except where a comment says otherwise.
type conn struct {
	s     *Server
	rwc   net.Conn
	vw    io.Writer // vectored(rwc): a response's segments in one writev
	br    *bufio.Reader
	state atomic.Int32
	base  context.Context
	// remote is the client's address, formatted once per connection
	// rather than for every request's RemoteAddr.
	remote string
	served bool // a request was read: the next head waits IdleTimeout
	res    response
	body   body
	head   []byte // a head that did not arrive in one buffer, assembled
	// The hang-up watch (watchLocked): mu guards these between the serving
	// goroutine, the timer's and the watching read's.
	mu         sync.Mutex
	timer      *time.Timer
	inHandler  bool
	bodyEnded  bool
	wantWatch  bool
	watching   bool
	watchDone  chan struct{}
	cancel     context.CancelFunc
	hungUp     bool
	pending    [1]byte // a byte the watching read took: the next request's
	hasPending bool
}

func newConn(s *Server, rwc net.Conn, base context.Context) *conn {
	c := &conn{s: s, rwc: rwc, vw: vectored(rwc), base: base, remote: rwc.RemoteAddr().String()}
	c.state.Store(stateIdle)
	c.body.c = c
	c.res.c = c
	return c
}

// Read is the buffered reader's source: the byte the watch took first.
func (c *conn) Read(p []byte) (int, error) {
	if c.hasPending && len(p) > 0 {
		c.hasPending = false
		p[0] = c.pending[0]
		return 1, nil
	}
	return c.rwc.Read(p)
}

func (c *conn) serve() {
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c)
	wb := writes.Get().(*[]byte)
	c.res.buf = (*wb)[:0]
	c.timer = time.AfterFunc(time.Hour, c.startWatch)
	c.timer.Stop()
	defer func() {
		if c.state.Load() == stateHijacked {
			// The reader went with the connection; the write buffer stays.
			*wb = c.res.buf[:0]
			writes.Put(wb)
			return
		}
		_ = c.rwc.Close()
		c.s.remove(c)
		c.br.Reset(nil)
		readers.Put(c.br)
		*wb = c.res.buf[:0]
		writes.Put(wb)
	}()
	for ; ; c.served = true {
		keep, err := c.serveOne()
		if err != nil || !keep || c.s.shutdown.Load() {
			return
		}
	}
}

// serveOne reads and answers one request; keep reports whether the
// connection may carry another.
func (c *conn) serveOne() (keep bool, err error) {
	h, err := c.readHead()
	if err != nil {
		var he *headError
		if errors.As(err, &he) {
			c.reject(he)
		}
		return false, err
	}
	r, err := h.request()
	if err != nil {
		c.reject(err.(*headError))
		return false, err
	}
	r.RemoteAddr = c.remote
	ctx, cancel := context.WithCancel(c.base)
	r = r.WithContext(ctx)
	c.body = body{c: c}
	switch {
	case h.chunked || h.contentLength > 0:
		c.body.remaining, c.body.chunked, c.body.expect = h.contentLength, h.chunked, h.expectContinue
		r.Body = &c.body
	default:
		c.body.done = true
		r.Body = http.NoBody
	}
	if !c.body.done {
		c.setReadDeadline(c.s.BodyTimeout)
	}
	c.res.reset(r, h)
	c.mu.Lock()
	c.inHandler, c.bodyEnded, c.wantWatch, c.hungUp, c.cancel = true, c.body.done, false, false, cancel
	c.mu.Unlock()
	c.timer.Reset(hangupAfter)
	panicked := c.run(r)
	c.stopWatch()
	cancel()
	if c.state.Load() == stateHijacked {
		return false, nil
	}
	if panicked {
		return false, errors.New("handler panicked")
	}
	if !c.body.drain() {
		c.res.closeAfter = true
	}
	if err := c.res.finish(); err != nil {
		return false, err
	}
	return !c.res.closeAfter && !c.hungUp, nil
}

// run calls the handler; a panic is logged (but http.ErrAbortHandler's)
// and ends the connection, not the process.
func (c *conn) run(r *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler { //nolint:errorlint // the sentinel panics as itself
				c.s.log().Error("http handler panicked", "remote", r.RemoteAddr, "path", r.URL.Path,
					"panic", v, "stack", string(debug.Stack()))
			}
		}
	}()
	c.s.Handler.ServeHTTP(&c.res, r)
	return false
}

// readHead reads one request head, waiting first up to the idle timeout
// for it to begin, then up to the header timeout for the rest.
func (c *conn) readHead() (*head, error) {
	if c.br.Buffered() == 0 {
		c.state.Store(stateIdle)
		idle := c.s.IdleTimeout
		if idle <= 0 || !c.served {
			// A new connection's first request is due like any head: a
			// client that connects and sends nothing is no idle keep-alive.
			idle = c.s.ReadHeaderTimeout
		}
		c.setReadDeadline(idle)
		if _, err := c.br.Peek(1); err != nil {
			return nil, err
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return nil, net.ErrClosed
		}
	}
	c.setReadDeadline(c.s.ReadHeaderTimeout)
	s, err := c.readHeadText()
	if err != nil {
		return nil, err
	}
	_ = c.rwc.SetReadDeadline(time.Time{})
	return parseHead(s)
}

func (c *conn) setReadDeadline(d time.Duration) {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	_ = c.rwc.SetReadDeadline(t)
}

var crlf2 = []byte("\r\n\r\n")

// readHeadText returns the head as one string (the header keys and values
// are cut from it), empty lines before it skipped (RFC 9112 2.2).
func (c *conn) readHeadText() (string, error) {
	limit := c.s.MaxHeaderBytes
	if limit <= 0 {
		limit = http.DefaultMaxHeaderBytes
	}
	limit += 4 << 10
	for skipped := 0; ; skipped++ {
		b, err := c.br.Peek(2)
		if err != nil || b[0] != '\r' || b[1] != '\n' || skipped > 4 {
			break
		}
		_, _ = c.br.Discard(2)
	}
	// The common case: the whole head is in the buffer already.
	if buf, _ := c.br.Peek(c.br.Buffered()); len(buf) > 0 {
		if i := bytes.Index(buf, crlf2); i >= 0 && i+4 <= limit {
			s := string(buf[:i+4])
			_, _ = c.br.Discard(i + 4)
			return s, nil
		}
	}
	c.head = c.head[:0]
	start := 0 // of the current line in c.head
	for {
		frag, err := c.br.ReadSlice('\n')
		if len(c.head)+len(frag) > limit {
			return "", errHeadTooLarge
		}
		c.head = append(c.head, frag...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(c.head) > 0:
			return "", bad("truncated head")
		case err != nil:
			if errors.Is(err, os.ErrDeadlineExceeded) && len(c.head) > 0 {
				return "", &headError{status: http.StatusRequestTimeout, msg: "request head timed out"}
			}
			return "", err
		}
		line := c.head[start:]
		if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
			return string(c.head), nil
		}
		start = len(c.head)
	}
}

// reject answers a head the server refuses and ends the connection. The
// body is the gateway's JSON error shape, {"error": {"code", "message"}},
// the code the status text in snake case (bad_request,
// request_header_fields_too_large, ...).
func (c *conn) reject(he *headError) {
	if he.status == http.StatusRequestTimeout {
		return // the client is not listening either
	}
	text := http.StatusText(he.status)
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Error detail `json:"error"`
	}{detail{strings.ToLower(strings.ReplaceAll(text, " ", "_")), he.msg}})
	msg := "HTTP/1.1 " + strconv.Itoa(he.status) + " " + text + "\r\nContent-Type: application/json\r\n" +
		"Cache-Control: no-store\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
	_ = c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c.rwc, msg); err == nil {
		c.linger()
	}
}

// rejectLinger bounds how long, and rejectDrain how much, a refused
// connection is read after the answer: closing with the rest of an
// oversized head unread makes the kernel send a reset, which can reach
// the client before it reads the 431.
const (
	rejectLinger = 500 * time.Millisecond
	rejectDrain  = 256 << 10
)

// linger half-closes the connection and reads what the client still
// sends, up to rejectDrain bytes or rejectLinger, so the close that
// follows is a FIN, not a reset.
func (c *conn) linger() {
	type closeWriter interface{ CloseWrite() error }
	cw, ok := c.rwc.(closeWriter)
	if lc, isLimited := c.rwc.(*limitedConn); isLimited {
		cw, ok = lc.Conn.(closeWriter)
	}
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.rwc.SetReadDeadline(time.Now().Add(rejectLinger))
	_, _ = io.CopyN(io.Discard, c.rwc, rejectDrain)
}

// writeContinue sends the 100 Continue an Expect: 100-continue request
// waits for, unless the response has begun.
func (c *conn) writeContinue() error {
	if c.res.committed {
		return nil
	}
	_, err := io.WriteString(c.rwc, "HTTP/1.1 100 Continue\r\n\r\n")
	return err
}

// bodyDone is the request body read to its end: a watch the timer asked
// for can begin.
func (c *conn) bodyDone() {
	c.mu.Lock()
	c.bodyEnded = true
	if c.wantWatch {
		c.watchLocked()
	}
	c.mu.Unlock()
}

// startWatch is the timer's: the handler has run for hangupAfter.
func (c *conn) startWatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inHandler {
		return
	}
	c.wantWatch = true
	if c.bodyEnded {
		c.watchLocked()
	}
}

// watchLocked starts a read of the connection that cancels the request's
// context when the client hangs up. It starts only with the body read and
// nothing of the next request buffered: the read must not race the
// handler's body reads, and a pipelined request is already here.
func (c *conn) watchLocked() {
	if c.watching || !c.inHandler || c.br.Buffered() > 0 || c.hasPending || c.state.Load() == stateHijacked {
		return
	}
	c.watching = true
	c.watchDone = make(chan struct{})
	_ = c.rwc.SetReadDeadline(time.Time{})
	go func() {
		n, err := c.rwc.Read(c.pending[:])
		c.mu.Lock()
		if n == 1 {
			c.hasPending = true
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.hungUp = true
			c.cancel()
		}
		c.mu.Unlock()
		close(c.watchDone)
	}()
}

// stopWatch ends the hang-up watch when the handler returns or hijacks.
func (c *conn) stopWatch() {
	c.timer.Stop()
	c.mu.Lock()
	c.inHandler = false
	watching := c.watching
	c.mu.Unlock()
	if watching {
		_ = c.rwc.SetReadDeadline(aLongTimeAgo)
		<-c.watchDone
		c.watching = false
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
}
