package proxy

import (
	"net/http"
	"net/http/httputil"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Headers a client may not send to a sandbox: the gateway's own credential,
// and the all-in-one sandbox's internal port-forward selector (ports go
// through the sandbox server's bridge, sandboxspec.PortPrefix, instead).
var strippedRequestHeaders = []string{"Authorization", ProxyPortHeader, "X-Api-Key", sandboxspec.SecretHeader}

// rewrite points the outbound request at the sandbox. ReverseProxy has
// already removed hop-by-hop headers and inbound X-Forwarded-* at this point.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	st := stateOf(pr.In.Context())
	base := st.up.BaseURL()
	out := pr.Out
	out.URL.Scheme = base.Scheme
	out.URL.Host = base.Host
	path, rawPath := st.path, st.rawPath
	if st.port != "" { // the sandbox server's bridge to that port (one allocation, on port routes only)
		path = sandboxspec.PortPrefix + st.port + path
		if rawPath != "" {
			rawPath = sandboxspec.PortPrefix + st.port + rawPath
		}
	}
	out.URL.Path, out.URL.RawPath = path, rawPath
	if base.Path != "" { // a sandbox behind another gateway: http://host/sandboxes/{id}
		out.URL.Path = base.Path + path
		if rawPath != "" {
			out.URL.RawPath = base.EscapedPath() + rawPath
		}
	}
	out.Host = ""
	for _, h := range strippedRequestHeaders {
		out.Header.Del(h)
	}
	if !p.cfg.ForwardCookies {
		// The gateway's origin's cookies (its status session among them)
		// are no sandbox's business (headers.go).
		delete(out.Header, "Cookie")
	}
	// Keep the chain from a load balancer in front: append, don't replace.
	if prior, ok := pr.In.Header["X-Forwarded-For"]; ok {
		out.Header["X-Forwarded-For"] = prior
	}
	pr.SetXForwarded()
	p.setSandboxKey(out.Header, st.up)
	if p.gateway != nil && base.Host == p.gateway.Host && base.Scheme == p.gateway.Scheme {
		out.Header.Set("Authorization", p.gwAuth)
	}
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
