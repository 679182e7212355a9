package proxy

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// A sandbox runs its tenant's code, yet its responses are served on the
// gateway's own origin (/threads/{t}/..., /sandboxes/{id}/...): a cookie it
// sets, or a page it serves that runs script, would act there with the
// gateway's authority over whoever views it (an admin's browser, say). So,
// unless the operator opts in (Config.ForwardCookies), no cookie goes to a
// sandbox and none comes back; every proxied response is told not to be
// sniffed or leak its URL (capability URLs are credentials) as a referrer,
// and a document gets a Content-Security-Policy: sandbox, which runs it in
// an opaque origin with no script, no forms and no same-origin access.
//
// The values are built once and shared by every response (never
// modified): setting them allocates nothing per request.
var (
	nosniff    = []string{"nosniff"}
	noReferrer = []string{"no-referrer"}
	cspSandbox = []string{"sandbox"}
)

const (
	headerCSP            = "Content-Security-Policy"
	headerNosniff        = "X-Content-Type-Options"
	headerReferrerPolicy = "Referrer-Policy"
)

// secureResponse applies the above to a sandbox's response: what the
// sandbox may not send is deleted from its headers (src), and the gateway's
// own go straight into the client's (dst), which ReverseProxy then adds
// src's to (a shared value set in src would be copied, one allocation per
// header per response). It runs after any 1xx response, whose headers
// ReverseProxy clears from dst. csp is the policy of documents (nil:
// cspSandbox; empty: none).
func (p *Proxy) secureResponse(dst, src http.Header, csp []string) {
	delete(src, sandboxspec.SecretHeader) // between the gateway and the sandbox only
	if !p.cfg.ForwardCookies {
		delete(src, "Set-Cookie")
	}
	delete(src, headerNosniff)
	delete(src, headerReferrerPolicy)
	dst[headerNosniff] = nosniff
	dst[headerReferrerPolicy] = noReferrer
	if csp == nil {
		csp = cspSandbox
	}
	if len(csp) == 0 || !document(src["Content-Type"]) {
		return
	}
	// A policy of the sandbox's own stays: every policy a response carries
	// is enforced, so adding one only narrows what the page may do.
	own := src[headerCSP]
	delete(src, headerCSP)
	if len(own) > 0 {
		dst[headerCSP] = append(own[:len(own):len(own)], csp[0])
	} else {
		dst[headerCSP] = csp
	}
}

// document reports whether a response of this Content-Type may be shown
// as a page that runs script: HTML, XML (XHTML, SVG), or no type at all
// (which a browser sniffs, nosniff or not).
func document(ct []string) bool {
	if len(ct) == 0 {
		return true
	}
	mime, _, _ := strings.Cut(ct[0], ";")
	mime = strings.TrimSpace(mime)
	return mime == "" || strings.EqualFold(mime, "text/html") || containsFold(mime, "xml")
}

// containsFold is strings.Contains ignoring ASCII case, without the
// allocation of lowering s.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
