package proxy

import (
	"bufio"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sandgate/sandgate/internal/serve"
)

// defaultUserAgent is what req.Write sends when a request has no
// User-Agent field at all (ReverseProxy sets an empty one: none is sent).
const defaultUserAgent = "Go-http-client/1.1"

// writeRequest writes req to w: the head of a request without a body (the
// sandbox API's GETs, most of its traffic) by appendHead, anything else as
// req.Write does.
func writeRequest(w *bufio.Writer, req *http.Request) error {
	if head, ok := appendHead(w.AvailableBuffer(), req); ok {
		_, err := w.Write(head)
		return err
	}
	return req.Write(w)
}

// appendHead appends req's head as req.Write writes it, but in the header
// map's order: req.Write sorts the fields (a sort and a pooled sorter per
// request, for nothing HTTP needs), and it writes a field whose name is no
// token, which appendHead drops. It reports false, appending nothing, for
// a request it leaves to req.Write: one with a body, or whose empty body
// is announced (POST, PUT, PATCH: Content-Length: 0), a close, trailers,
// CONNECT, an opaque URL, and what req.Write rewrites or refuses (a zoned
// or invalid host, which covers any it would punycode; a control byte in
// the query).
func appendHead(b []byte, req *http.Request) ([]byte, bool) {
	if req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 || len(req.TransferEncoding) > 0 ||
		len(req.Trailer) > 0 || req.Close || req.URL.Opaque != "" {
		return b, false
	}
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodConnect:
		return b, false
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	path, query := req.URL.EscapedPath(), req.URL.RawQuery
	if path == "" {
		path = "/"
	}
	if !serve.IsToken(req.Method) || !httpguts.ValidHostHeader(host) || strings.IndexByte(host, '%') >= 0 || hasCTL(query) {
		return b, false
	}
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, path...)
	if req.URL.ForceQuery || query != "" {
		b = append(b, '?')
		b = append(b, query...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	ua := defaultUserAgent
	if v, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(v) > 0 {
			ua = v[0]
		}
	}
	if ua != "" {
		b = serve.AppendField(b, "User-Agent", ua)
	}
	b = serve.AppendFields(b, req.Header, writesItself)
	return append(b, "\r\n"...), true
}

// writesItself reports the fields req.Write writes from the request's own
// fields, never from its header map.
func writesItself(name string) bool {
	switch name {
	case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// hasCTL reports a control byte, which req.Write refuses in a request URI.
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}
