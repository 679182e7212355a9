package egress

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// exchange is one request or tunnel, from its arrival to its one log line.
type exchange struct {
	id     backend.EgressIdentity
	t      target
	addrs  []netip.Addr // resolved and checked
	reason string
	status int
	err    error
	// up and down count a tunnel's bytes (client to upstream and back).
	up, down int64
}

type exchangeKey struct{}

func (p *Proxy) handler(s *server, identify func(*http.Request) (backend.EgressIdentity, bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		x := &exchange{}
		defer p.finish(r, x, began)
		defer func() {
			if v := recover(); v != nil {
				// An aborted response body panics ErrAbortHandler on
				// purpose; anything else is a bug, and still only this
				// connection's: net/http closes it without answering.
				if v != http.ErrAbortHandler {
					p.cfg.Log.Error("egress: panic", "panic", v, "stack", string(debug.Stack()))
				}
				panic(http.ErrAbortHandler)
			}
		}()
		id, ok := identify(r)
		if !ok {
			x.t.host = r.Host
			p.refuse(w, x, ReasonUnauthorized)
			return
		}
		x.id = id
		if r.Method == http.MethodConnect {
			p.connect(s, w, r, x)
		} else {
			p.forwardHTTP(w, r, x)
		}
	})
}

// check decides a request for authority: allowed name, resolved, every
// address public. On ReasonOK, x.addrs are the addresses to dial.
func (p *Proxy) check(ctx context.Context, x *exchange, authority string, defaultPort uint16) string {
	t, reason := parseTarget(authority, defaultPort)
	x.t = t
	if reason != "" {
		return reason
	}
	if reason := allowed(x.id.Egress, t); reason != ReasonOK {
		return reason
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	addrs, err := resolveChecked(ctx, p.cfg.Resolver, t.host, p.cfg.AllowAddresses)
	if refused, ok := errors.AsType[*RefusedError](err); ok {
		x.err = errors.New("resolves to " + refused.Addr.String())
		return ReasonPrivateAddress
	}
	if err != nil {
		x.err = err
		return ReasonResolveFailed
	}
	x.addrs = addrs
	return ReasonOK
}

// forwardHTTP proxies an absolute-URI http:// request. The URL's host is
// the one checked, dialled and sent as Host; a Host header is dropped.
func (p *Proxy) forwardHTTP(w http.ResponseWriter, r *http.Request, x *exchange) {
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		// Origin-form requests (GET / with a Host header) are not proxy
		// requests, and https:// must use CONNECT.
		x.t.host = r.Host
		p.refuse(w, x, ReasonBadRequest)
		return
	}
	if reason := p.check(r.Context(), x, r.URL.Host, 80); reason != ReasonOK {
		p.refuse(w, x, reason)
		return
	}
	x.reason = ReasonOK
	p.forward.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x)))
}

// rewrite points the outgoing request at the first checked address (the
// transport's pool key; dialForward falls back to the others) and sends the
// checked name as Host.
func rewrite(pr *httputil.ProxyRequest) {
	x := pr.In.Context().Value(exchangeKey{}).(*exchange)
	pr.Out.URL.Host = netip.AddrPortFrom(x.addrs[0], x.t.port).String()
	pr.Out.Host = x.t.host
	if x.t.port != 80 {
		pr.Out.Host = x.t.String()
	}
	for k := range pr.Out.Header {
		if strings.HasPrefix(k, "Proxy-") {
			delete(pr.Out.Header, k)
		}
	}
}

func recordStatus(resp *http.Response) error {
	resp.Request.Context().Value(exchangeKey{}).(*exchange).status = resp.StatusCode
	return nil
}

// dialError marks a failure to connect, as opposed to one after.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x := r.Context().Value(exchangeKey{}).(*exchange)
	x.err = err
	if _, ok := errors.AsType[*dialError](err); ok {
		p.refuse(w, x, ReasonDialFailed)
		return
	}
	p.refuse(w, x, ReasonUpstreamFailed)
}

// dialForward is the transport's dial: it connects to the addresses its
// request checked, whatever address the transport names.
func (p *Proxy) dialForward(ctx context.Context, _, _ string) (net.Conn, error) {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	if x == nil || len(x.addrs) == 0 {
		return nil, &dialError{errors.New("no checked address")}
	}
	return p.dial(ctx, x)
}

// dial connects to the first of x's checked addresses that answers.
func (p *Proxy) dial(ctx context.Context, x *exchange) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	c, err := dialFirst(ctx, p.cfg.Dial, "tcp", x.addrs, x.t.port)
	if err != nil {
		return nil, &dialError{err}
	}
	return c, nil
}

// connect opens a tunnel to a checked address and splices it to the
// client. The allow-list judged the CONNECT's name; the tunnel must carry
// TLS for that same name, or an allowed name would front for any other on
// a shared host (domain fronting: CONNECT allowed.example, SNI
// evil.example). So the tunnel is answered, its ClientHello read, and its
// server name (SNI) compared with the CONNECT's before anything is dialled:
// a different name, none (an IP-only client) or no TLS at all (plain HTTP,
// whose Host would be the sandbox's to choose) ends it with no packet
// sent upstream. The 200 has to come first: a client sends its ClientHello
// only once the tunnel is up.
func (p *Proxy) connect(s *server, w http.ResponseWriter, r *http.Request, x *exchange) {
	if reason := p.check(r.Context(), x, r.URL.Host, 0); reason != ReasonOK {
		p.refuse(w, x, reason)
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		x.err = err
		p.refuse(w, x, ReasonBadRequest)
		return
	}
	if !s.track(client) {
		client.Close()
		return
	}
	defer s.untrack(client)
	defer client.Close()
	client.SetDeadline(time.Time{}) //nolint:errcheck // the server's are not the tunnel's
	x.status = http.StatusOK        // what the client got, also when its ClientHello then ends the tunnel
	buf.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := buf.Flush(); err != nil {
		x.reason, x.err = ReasonBadRequest, err
		return
	}
	client.SetReadDeadline(time.Now().Add(helloTimeout)) //nolint:errcheck // a closed conn fails the read
	sni, early, err := readClientHello(buf.Reader, client)
	switch {
	case err != nil:
		x.reason, x.err = ReasonNotTLS, err
		return
	case sni == "":
		x.reason = ReasonNoSNI
		client.Write(alertUnrecognizedName) //nolint:errcheck // the client may be gone
		return
	case !strings.EqualFold(sni, x.t.host):
		x.reason, x.err = ReasonSNIMismatch, errors.New("server name "+strconv.Quote(sni))
		client.Write(alertAccessDenied) //nolint:errcheck // the client may be gone
		return
	}
	client.SetReadDeadline(time.Time{}) //nolint:errcheck // splice sets its own
	up, err := p.dial(r.Context(), x)
	if err != nil {
		x.reason, x.err = ReasonDialFailed, err
		return
	}
	if !s.track(up) {
		up.Close()
		return
	}
	defer s.untrack(up)
	x.reason = ReasonOK
	// What the client sent past the ClientHello may sit in the buffer too.
	if n := buf.Reader.Buffered(); n > 0 {
		rest, _ := buf.Reader.Peek(n)
		early = append(early, rest...)
	}
	if _, err := up.Write(early); err != nil {
		up.Close()
		return
	}
	x.up = int64(len(early))
	up2, down := splice(client, up, p.cfg.IdleTimeout)
	x.up += up2
	x.down = down
}

// splice copies both ways until both directions ended, either side failed,
// or nothing moved either way for idle.
func splice(client, up net.Conn, idle time.Duration) (sent, received int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); up.Close() }) }
	done := make(chan struct{})
	go func() {
		received = pipe(client, up, &last, idle, closeBoth)
		close(done)
	}()
	sent = pipe(up, client, &last, idle, closeBoth)
	<-done
	closeBoth()
	return sent, received
}

// copyBufs are the 32 KiB buffers of tunnels and forwarded bodies.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// bufferPool lends copyBufs to the ReverseProxy.
type bufferPool struct{}

func (bufferPool) Get() []byte  { return *copyBufs.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBufs.Put(&b) }

// pipe copies src to dst. A read that times out while the other direction
// moved within idle is retried; at EOF dst is half-closed so the peer sees
// the end while the other direction goes on.
func pipe(dst, src net.Conn, last *atomic.Int64, idle time.Duration, closeBoth func()) int64 {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		src.SetReadDeadline(time.Now().Add(idle)) //nolint:errcheck // a closed conn fails the read below
		k, err := src.Read(buf)
		if k > 0 {
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:k]); werr != nil {
				closeBoth()
				return n
			}
			n += int64(k)
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return n
			}
			closeBoth()
			return n
		case errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle:
		default:
			closeBoth()
			return n
		}
	}
}

// refuse answers a request that does not get through with a short JSON body
// naming the reason and the host the client asked for.
func (p *Proxy) refuse(w http.ResponseWriter, x *exchange, reason string) {
	x.reason, x.status = reason, statusFor(reason)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if reason == ReasonUnauthorized {
		h.Set("Proxy-Authenticate", `Basic realm="sandgate egress"`)
	}
	w.WriteHeader(x.status)
	json.NewEncoder(w).Encode(struct { //nolint:errcheck // the client may be gone
		Error  string `json:"error"`
		Reason string `json:"reason"`
		Host   string `json:"host"`
	}{"egress refused", reason, x.t.host})
}

func statusFor(reason string) int {
	switch reason {
	case ReasonBadRequest:
		return http.StatusBadRequest
	case ReasonUnauthorized:
		return http.StatusProxyAuthRequired
	case ReasonResolveFailed, ReasonDialFailed, ReasonUpstreamFailed:
		return http.StatusBadGateway
	}
	return http.StatusForbidden
}

// finish logs and records an exchange, once, however it ended.
func (p *Proxy) finish(r *http.Request, x *exchange, began time.Time) {
	if x.reason == "" {
		x.reason = ReasonBadRequest // a panic before any decision
	}
	allowed := x.reason == ReasonOK
	p.cfg.Recorder.EgressDecision(allowed, x.reason)
	if !allowed && statusFor(x.reason) == http.StatusForbidden && x.id.SandboxID != "" && p.cfg.Denied != nil {
		p.cfg.Denied(x.id, x.t.host, x.reason)
	}
	level, decision := slog.LevelInfo, "allow"
	if !allowed {
		level, decision = slog.LevelWarn, "deny"
	}
	attrs := []slog.Attr{
		slog.String("sandbox_id", x.id.SandboxID), slog.String("user", x.id.User), slog.String("thread", x.id.Thread),
		slog.String("method", r.Method), slog.String("host", x.t.host), slog.Int("port", int(x.t.port)),
		slog.String("decision", decision), slog.String("reason", x.reason), slog.Int("status", x.status),
		slog.Duration("took", time.Since(began)),
	}
	if r.Method == http.MethodConnect && allowed {
		attrs = append(attrs, slog.Int64("bytes_up", x.up), slog.Int64("bytes_down", x.down))
	}
	if x.err != nil {
		attrs = append(attrs, slog.String("err", x.err.Error()))
	}
	p.cfg.Log.LogAttrs(r.Context(), level, "egress", attrs...)
}
