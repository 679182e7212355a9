package router

import "net/url"

// A data-plane path with dot segments is refused (errDotSegment). The path
// is forwarded below a sandbox URL that may itself be a gateway path (the
// remote backend's {provisioner}/sandboxes/{id}, reached with the
// provisioner's admin key): a proxy in front of that upstream which
// normalises /sandboxes/{id}/v1/../../sandboxes/{other}/v1/x would hand
// another user's sandbox to the caller. No client needs them (browsers and
// HTTP libraries resolve dot segments before sending), so they are refused
// rather than resolved here.

// maxUnescape bounds how many percent-decoding layers are looked through:
// %252e%252e is .. to a chain of two decoding proxies.
const maxUnescape = 3

// hasDotSegment reports whether the decoded request path has a "." or ".."
// segment, counting '\' as a separator (some servers do) and looking
// through further percent-encoding layers. No allocation unless a segment
// holds a '%' (only a doubly encoded path does).
func hasDotSegment(path string) bool {
	for layer := 0; ; layer++ {
		pct, start := false, 0
		// One pass over the bytes (no iterator: this runs on every
		// proxied request); i == len(path) ends the last segment.
		for i := 0; i <= len(path); i++ {
			if i < len(path) && path[i] != '/' && path[i] != '\\' {
				pct = pct || path[i] == '%'
				continue
			}
			if seg := path[start:i]; seg == "." || seg == ".." {
				return true
			}
			start = i + 1
		}
		if !pct {
			return false
		}
		if layer == maxUnescape {
			return true // more layers than any proxy chain decodes: refuse
		}
		next, err := url.PathUnescape(path)
		if err != nil {
			return true // a malformed escape that a lenient proxy might still decode
		}
		path = next
	}
}
