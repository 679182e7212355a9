package proxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Headers a client may not send to a sandbox: the gateway's own credential,
// the all-in-one sandbox's internal port-forward selector (ports go
// through the sandbox server's bridge, sandboxspec.PortPrefix, instead),
// and the caller the gateway names (a client's copy would forge "who" in
// the sandbox's command log). Canonical forms: they are deleted from the
// header map directly.
var strippedRequestHeaders = []string{"Authorization", ProxyPortHeader, "X-Api-Key", sandboxspec.SecretHeader,
	sandboxspec.CallerHeader}

// rewrite points the outbound request at the sandbox. ReverseProxy has
// already removed hop-by-hop headers and inbound X-Forwarded-* at this point.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	st := stateOf(pr.In.Context())
	base := st.up.BaseURL()
	out := pr.Out
	direct := st.direct()
	aim(out.URL, st)
	path, rawPath := st.path, st.rawPath
	if st.port != "" && !direct { // the sandbox server's bridge to that port (one allocation, on port routes only)
		path = sandboxspec.PortPrefix + st.port + path
		if rawPath != "" {
			rawPath = sandboxspec.PortPrefix + st.port + rawPath
		}
	}
	out.URL.Path, out.URL.RawPath = path, rawPath
	if base.Path != "" && !direct { // a sandbox behind another gateway: http://host/sandboxes/{id}
		out.URL.Path = base.Path + path
		if rawPath != "" {
			out.URL.RawPath = base.EscapedPath() + rawPath
		}
	}
	out.Host = ""
	for _, h := range strippedRequestHeaders {
		delete(out.Header, h)
	}
	if !p.cfg.ForwardCookies {
		// The gateway's origin's cookies (its status session among them)
		// are no sandbox's business (headers.go).
		delete(out.Header, "Cookie")
	}
	setForwarded(pr.In, out.Header)
	if direct {
		return // an app on a port, not the sandbox server: no key, no caller
	}
	p.setSandboxKey(out.Header, st.up)
	if st.caller != nil {
		out.Header[sandboxspec.CallerHeader] = st.caller
	}
	if p.gateway != nil && base.Host == p.gateway.Host && base.Scheme == p.gateway.Scheme {
		out.Header.Set("Authorization", p.gwAuth)
	}
}

// X-Forwarded-Proto's values, shared by every request (never modified).
var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// setForwarded sets X-Forwarded-For, -Host and -Proto on h as
// httputil.ProxyRequest.SetXForwarded does, keeping the chain of a load
// balancer in front (its X-Forwarded-For is appended to, not replaced),
// in one allocation where SetXForwarded takes three: For and Host share
// one backing array, Proto is a shared value.
func setForwarded(in *http.Request, h http.Header) {
	h["X-Forwarded-Proto"] = protoHTTP
	if in.TLS != nil {
		h["X-Forwarded-Proto"] = protoHTTPS
	}
	client, _, err := net.SplitHostPort(in.RemoteAddr)
	if err != nil {
		delete(h, "X-Forwarded-For")
		h["X-Forwarded-Host"] = []string{in.Host}
		return
	}
	if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
		client = strings.Join(prior, ", ") + ", " + client
	}
	both := []string{client, in.Host}
	h["X-Forwarded-For"], h["X-Forwarded-Host"] = both[:1:1], both[1:]
}

// direct reports a request for a port dialled directly: an image without
// Sandgate's server has no bridge, and its ports are reached on the
// container's or Pod's own address (Upstream.PortHost).
func (st *state) direct() bool { return st.port != "" && st.up.PortHost() != "" }

// aim points u at st's upstream: the sandbox API's scheme and host, or a
// directly dialled port's address (which allocates, on such requests
// only).
func aim(u *url.URL, st *state) {
	if st.direct() {
		u.Scheme, u.Host = "http", net.JoinHostPort(st.up.PortHost(), st.port)
		return
	}
	base := st.up.BaseURL()
	u.Scheme, u.Host = base.Scheme, base.Host
}

// setSandboxKey sets the upstream's own secret, else the shared key, as the
// sandbox key header (client copies were stripped before). The value slices
// are built once and shared: setting them allocates nothing per request.
func (p *Proxy) setSandboxKey(h http.Header, up Upstream) {
	switch key := up.SandboxKey(); {
	case key != nil:
		h[sandboxspec.SecretHeader] = key
	case p.apiKey != nil:
		h[sandboxspec.SecretHeader] = p.apiKey
	default:
		delete(h, sandboxspec.SecretHeader)
	}
}
