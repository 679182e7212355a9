package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// TransportConfig tunes the connection pool of one sandbox incarnation.
// The zero value is the documented default.
type TransportConfig struct {
	DialTimeout     time.Duration // 0 = 2s: a sandbox is local or in-cluster
	MaxIdle         int           // 0 = 256 (Go's default of 2 per host reconnects under load)
	IdleConnTimeout time.Duration // 0 = 90s
	// MaxResponseHeaderBytes bounds a sandbox's response head, which is
	// read into memory (502 past it). 0 = DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int64
	// Dial, when set, makes every connection, whatever the request's host:
	// a sandbox that listens on a Unix socket.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Standard sends every request through a standard http.Transport, as
	// only upgrades are otherwise, with the same dial, timeouts and pool
	// size: the transport_impl: net/http fallback, should a bug be found in
	// this transport's exchange.
	Standard bool
}

// DefaultMaxResponseHeaderBytes of TransportConfig: the bound the gateway
// puts on a client's request head (max_header_bytes). A sandbox API's heads
// are a few hundred bytes; what is read before the refusal is garbage the
// gateway allocated for a hostile sandbox, so the bound is kept small.
const DefaultMaxResponseHeaderBytes = 64 << 10

// ErrResponseHeadersTooLarge is a sandbox response head over
// TransportConfig.MaxResponseHeaderBytes.
var ErrResponseHeadersTooLarge = errors.New("sandbox response headers too large")

// Transport is the HTTP/1.1 connection pool of one sandbox incarnation.
//
// It writes the request and reads the response on the calling goroutine,
// keeping idle connections on a stack; http.Transport spends two goroutines
// and several channel hand-offs per connection, which is where a Go proxy
// loses to nginx on small requests. Before an idle connection is reused it is
// checked for a close from the sandbox (a killed sandbox closes them all), so
// a dead sandbox shows up as a dial failure — the one failure that is safe to
// retry for any method. Upgrade requests (WebSocket) go through a standard
// http.Transport, which handles the switch to a raw stream.
//
// No response-header timeout: an exec may answer after many minutes. The
// request's context bounds every call: cancelling it closes the connection.
type Transport struct {
	cfg    TransportConfig
	dialer net.Dialer

	mu     sync.Mutex
	idle   []*conn
	closed bool
	std    *http.Transport // for upgrades, built on the first one; nil until then
}

// NewTransport returns a pool for one sandbox incarnation.
func NewTransport(cfg TransportConfig) *Transport {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = 256
	}
	if cfg.IdleConnTimeout == 0 {
		cfg.IdleConnTimeout = 90 * time.Second
	}
	if cfg.MaxResponseHeaderBytes == 0 {
		cfg.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	return &Transport{cfg: cfg, dialer: net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}}
}

// conn is one connection to the sandbox. br and bw are set only while a
// request is in flight: an idle connection holds no buffer, since every
// cached thread keeps one idle connection and 12 KiB of buffers per thread
// would be most of the gateway's memory per thread.
type conn struct {
	net.Conn
	addr      string    // what it was dialled as: the idle stack's key
	head      headLimit // what br reads through
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// Buffer sizes: a response head fits in 4 KiB and larger body reads
// (ReverseProxy copies 32 KiB at a time) bypass the buffer; 8 KiB sends a
// request head with a 4 KiB body in one write.
const (
	readBufSize  = 4 << 10
	writeBufSize = 8 << 10
)

var (
	readBufs  = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
)

// attach gives c its buffers for one request.
func (c *conn) attach() {
	c.br = readBufs.Get().(*bufio.Reader)
	c.br.Reset(&c.head)
	c.bw = writeBufs.Get().(*bufio.Writer)
	c.bw.Reset(c.Conn)
}

// detach returns c's buffers to the pools as c goes idle. Only an exchange
// read to its end detaches (nothing reads br after that); a connection
// closed mid-exchange keeps its buffers for the GC, since a body reader may
// still hold br.
func (c *conn) detach() {
	c.br.Reset(nil)
	readBufs.Put(c.br)
	c.bw.Reset(nil)
	writeBufs.Put(c.bw)
	c.br, c.bw = nil, nil
}

var errTransportClosed = errors.New("sandbox connection pool closed")

// RoundTrip sends one request on a pooled connection.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.cfg.Standard || req.URL.Scheme != "http" || req.Header.Get("Upgrade") != "" {
		std, err := t.upgrader()
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := std.RoundTrip(req)
		return resp, stdError(err)
	}
	ctx := req.Context()
	c, err := t.get(ctx, req.URL.Host)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	// Cancelling the request unblocks any read or write on the connection.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	if err := writeRequest(c.bw, req); err != nil {
		stop()
		c.Close()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		c.Close()
		return nil, err
	}
	c.head.left = t.cfg.MaxResponseHeaderBytes
	resp, err := readResponse(c.br, req)
	c.head.left = -1
	if err != nil {
		stop()
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	reusable := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		t.release(c, stop, reusable)
		return resp, nil
	}
	resp.Body = &body{rc: resp.Body, t: t, c: c, stop: stop, reusable: reusable}
	return resp, nil
}

// readResponse reads the final response, skipping informational ones other
// than 101 (100 Continue, 103 Early Hints).
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// get pops a live idle connection or dials a new one.
func (t *Transport) get(ctx context.Context, addr string) (*conn, error) {
	for {
		c, err := t.takeIdle(addr)
		if err != nil {
			return nil, err
		}
		if c == nil {
			break
		}
		if time.Since(c.idleSince) < t.cfg.IdleConnTimeout && peerOpen(c.Conn) {
			c.attach()
			return c, nil
		}
		c.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, addr: addr, head: headLimit{r: nc, left: -1}}
	c.attach()
	return c, nil
}

// takeIdle pops the newest idle connection to addr, or nil. The stack
// holds one address but for an incarnation whose ports are dialled
// directly (Upstream.PortHost): then a connection to the sandbox API, or
// to another port, must never carry this request. The first entry
// matches unless such ports are in use, so the scan costs nothing on the
// sandbox API's path. A closed pool is errTransportClosed.
func (t *Transport) takeIdle(addr string) (*conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errTransportClosed
	}
	for i := len(t.idle) - 1; i >= 0; i-- {
		if c := t.idle[i]; c.addr == addr {
			copy(t.idle[i:], t.idle[i+1:])
			t.idle[len(t.idle)-1] = nil
			t.idle = t.idle[:len(t.idle)-1]
			return c, nil
		}
	}
	return nil, nil
}

// headLimit counts the bytes read while a response head is read (left >= 0;
// read-ahead into the body counts too): http.ReadResponse has no bound of its
// own, and a sandbox could make the gateway buffer any amount of headers.
type headLimit struct {
	r    io.Reader
	left int64 // -1 = no limit
}

func (h *headLimit) Read(p []byte) (int, error) {
	if h.left < 0 {
		return h.r.Read(p)
	}
	if h.left == 0 {
		return 0, ErrResponseHeadersTooLarge
	}
	if int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= int64(n)
	return n, err
}

// dial connects to the sandbox: through cfg.Dial, or to addr.
func (t *Transport) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if t.cfg.Dial != nil {
		return t.cfg.Dial(ctx, network, addr)
	}
	return t.dialer.DialContext(ctx, network, addr)
}

// release returns c to the pool, or closes it.
func (t *Transport) release(c *conn, stop func() bool, reusable bool) {
	// stop() is false when the context already fired and poisoned the deadline.
	if !stop() || !reusable || c.br.Buffered() > 0 {
		c.Close()
		return
	}
	c.detach()
	c.idleSince = time.Now()
	t.mu.Lock()
	if t.closed || len(t.idle) >= t.cfg.MaxIdle {
		t.mu.Unlock()
		c.Close()
		return
	}
	t.idle = append(t.idle, c)
	t.mu.Unlock()
}

// CloseIdleConnections closes the pool for good: the incarnation is gone.
// Requests in flight finish; their connections are closed afterwards.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	t.closed = true
	idle, std := t.idle, t.std
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	if std != nil {
		std.CloseIdleConnections()
	}
}

// upgrader returns the standard transport used for protocol upgrades (for
// every request with cfg.Standard), built under mu on the first one, as
// close reads it; a closed pool refuses, so a retired incarnation gets no
// new transport nor connection.
func (t *Transport) upgrader() (*http.Transport, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errTransportClosed
	}
	if t.std == nil {
		idle := 4 // upgrades are rare, and an upgraded connection is not reused
		if t.cfg.Standard {
			idle = t.cfg.MaxIdle
		}
		t.std = &http.Transport{
			Proxy:                  nil,
			DialContext:            t.dialUpgrade,
			DisableCompression:     true,
			TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
			MaxIdleConnsPerHost:    idle,
			IdleConnTimeout:        t.cfg.IdleConnTimeout,
			MaxResponseHeaderBytes: t.cfg.MaxResponseHeaderBytes,
		}
	}
	return t.std, nil
}

// stdError gives http.Transport's refusal of an oversized response head
// the error this transport's own refusal has (502
// sandbox_headers_too_large, not an internal error); net/http exports no
// value for it.
func stdError(err error) error {
	if err != nil && strings.Contains(err.Error(), "server response headers exceeded") {
		return fmt.Errorf("%w: %w", ErrResponseHeadersTooLarge, err)
	}
	return err
}

// dialUpgrade is the upgrade transport's dialer: an upgrade that got the
// transport just before the pool closed dials nothing after it.
func (t *Transport) dialUpgrade(ctx context.Context, network, addr string) (net.Conn, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, errTransportClosed
	}
	return t.dial(ctx, network, addr)
}

// body hands the connection back to the pool when the response has been
// read to the end, and closes it when the reader gives up early.
type body struct {
	rc       io.ReadCloser
	t        *Transport
	c        *conn
	stop     func() bool
	reusable bool
	done     bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.done = true
		b.t.release(b.c, b.stop, b.reusable)
	}
	return n, err
}

func (b *body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	b.stop()
	return b.c.Close()
}
