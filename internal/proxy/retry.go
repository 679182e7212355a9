package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// dispatch sends each request through its upstream's own connection pool and
// retries dial-class failures against a re-resolved upstream. A dial failure
// means no byte reached the sandbox, so a retry is safe for any method.
type dispatch struct{ p *Proxy }

// retryBackoff is the pause before each retry (the resolver may also take a
// while: it can recreate the sandbox).
var retryBackoff = []time.Duration{25 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}

// ResolveError wraps a Resolver failure during a retry, so the error handler
// answers with the resolver's status (e.g. 503 while provisioning) rather than 502.
type ResolveError struct{ Err error }

func (e *ResolveError) Error() string { return fmt.Sprintf("re-resolve sandbox: %v", e.Err) }
func (e *ResolveError) Unwrap() error { return e.Err }

// PortError is a dial failure on a port dialled directly
// (Upstream.PortHost): refused (nothing listens) or not answered.
type PortError struct {
	Port string
	Err  error
}

func (e *PortError) Error() string { return fmt.Sprintf("port %s in the sandbox: %v", e.Port, e.Err) }
func (e *PortError) Unwrap() error { return e.Err }

// UnreachableError is a dial failure that survived every retry.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return fmt.Sprintf("sandbox unreachable: %v", e.Err) }
func (e *UnreachableError) Unwrap() error { return e.Err }

func (d *dispatch) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateOf(req.Context())
	var body *guardedBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &guardedBody{rc: req.Body, limit: d.p.cfg.MaxBodyBytes}
		req.Body = body
		st.body = body
	}
	for attempt := 0; ; attempt++ {
		span := traceAttempt(req, st.up, st.path, attempt)
		resp, err := st.up.RoundTripper().RoundTrip(req)
		if err == nil {
			return endAttempt(span, resp), nil
		}
		failAttempt(span, err)
		if rerr := body.readErr(); rerr != nil {
			// The transport wraps body read errors in a type errors.As cannot
			// see through: the body's own error (over the limit, a client
			// that stalled or went away) decides the status.
			return nil, &BodyReadError{Err: rerr}
		}
		if !isDial(err) || body.used() {
			return nil, failure(err, body)
		}
		if st.direct() && !errors.Is(err, errTransportClosed) {
			// Nothing listens there, or the port is filtered: the
			// sandbox is fine, a re-resolve would change nothing.
			return nil, &PortError{Port: st.port, Err: err}
		}
		if attempt >= d.p.cfg.MaxRetries {
			return nil, &UnreachableError{Err: err}
		}
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(retryBackoff[min(attempt, len(retryBackoff)-1)]):
		}
		up, rerr := d.p.resolver.Retry(req.Context(), st.up)
		if rerr != nil {
			return nil, &ResolveError{Err: rerr}
		}
		up.Begin()
		st.up.End()
		st.up = up
		req = d.p.retarget(req, st)
	}
}

// retarget returns a shallow copy of req aimed at up (RoundTrippers must
// not modify the request they were given). up is another incarnation, with
// a secret of its own: the headers are copied to carry it (a retry is rare,
// the copy is affordable).
func (p *Proxy) retarget(req *http.Request, st *state) *http.Request {
	r := *req
	u := *req.URL
	aim(&u, st)
	r.URL = &u
	r.Header = req.Header.Clone()
	if !st.direct() {
		p.setSandboxKey(r.Header, st.up)
	}
	return &r
}

// isDial reports a failure before anything was sent: no connection at all
// (refused, unreachable, dial timeout), or the incarnation's pool closed
// because the pool retired it while this request held its route.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, errTransportClosed)
}

// guardedBody lets a request body survive a failed attempt: the Transport
// closes the body on error, but after a dial failure nothing was read and the
// same body can be sent again. The server closes the real body at the end.
// It counts the bytes sent, for the access log, and stops at limit (when
// positive) with *http.MaxBytesError, as http.MaxBytesReader does, without
// another allocation per request. It keeps the first read error.
type guardedBody struct {
	rc     io.ReadCloser
	limit  int64
	read   atomic.Bool
	failed atomic.Bool // err is set
	err    error
	n      atomic.Int64
}

func (b *guardedBody) Read(p []byte) (int, error) {
	if b.limit > 0 {
		// Read at most one byte past the limit: enough to know it is exceeded.
		if left := b.limit - b.n.Load() + 1; int64(len(p)) > left {
			p = p[:max(left, 0)]
		}
	}
	n, err := b.rc.Read(p)
	if n > 0 || err == io.EOF {
		b.read.Store(true)
		b.n.Add(int64(n))
	}
	if b.limit > 0 && b.n.Load() > b.limit {
		n, err = max(n-1, 0), &http.MaxBytesError{Limit: b.limit}
	}
	if err != nil && err != io.EOF && !b.failed.Load() {
		b.err = err
		b.failed.Store(true)
	}
	return n, err
}

func (b *guardedBody) Close() error { return nil }

func (b *guardedBody) used() bool { return b != nil && b.read.Load() }

// readErr is the first error reading the body other than its end; nil when none.
func (b *guardedBody) readErr() error {
	if b == nil || !b.failed.Load() {
		return nil
	}
	return b.err
}
