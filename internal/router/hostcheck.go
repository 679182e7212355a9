package router

import (
	"net/http"
	"net/url"
	"strings"
)

// loopbackHosts are always served: a browser page can only reach them
// under these names from the machine itself, never through rebinding.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// hostCheck is the DNS-rebinding defence of a gateway without
// authentication. A page on evil.example whose name is rebound to 127.0.0.1
// makes the browser send same-origin requests (no Origin, no cross-site
// marker) with Host: evil.example; only the Host header tells them apart.
// With authentication the check is off: Sandgate's credentials are bearer
// tokens and API keys, which a browser never attaches by itself, so a
// rebound page's requests carry none and get 401.
type hostCheck struct {
	names  []string // lowercase, no port, no brackets
	suffix string   // host_suffix: it and every name under it
}

// newHostCheck allows the loopback names, the public URL's host, the host
// suffix and extra (allowed_hosts); nil when extra holds "*" (check off).
func newHostCheck(publicURL, suffix string, extra []string) *hostCheck {
	h := &hostCheck{names: append([]string{}, loopbackHosts...), suffix: suffix}
	if u, err := url.Parse(publicURL); err == nil && u.Hostname() != "" {
		h.names = append(h.names, strings.ToLower(u.Hostname()))
	}
	for _, e := range extra {
		if e == "*" {
			return nil
		}
		h.names = append(h.names, strings.ToLower(strings.Trim(e, "[]")))
	}
	return h
}

// allows reports whether r may be served; /healthz and /readyz always are,
// so that a kubelet or load balancer can probe by IP or service name (they
// answer a status, do nothing and disclose nothing). No allocation.
func (h *hostCheck) allows(r *http.Request) bool {
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		return true
	}
	name := hostName(r.Host)
	if name == "" {
		return false
	}
	for _, n := range h.names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	if h.suffix == "" {
		return false
	}
	n := len(name) - len(h.suffix)
	return n >= 0 && strings.EqualFold(name[n:], h.suffix) && (n == 0 || name[n-1] == '.')
}

// hostName is host without its port, IPv6 brackets or a final dot.
func hostName(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
		return ""
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	return strings.TrimSuffix(host, ".")
}
