package serve

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// headError is a request head the server refuses: it answers status with
// msg and closes the connection (the rest of the stream cannot be trusted).
type headError struct {
	status int
	msg    string
}

func (e *headError) Error() string { return e.msg }

func bad(msg string) *headError { return &headError{status: http.StatusBadRequest, msg: msg} }

var errHeadTooLarge = &headError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "request header too large"}

// head is a parsed request head: what the request needs besides its body.
type head struct {
	method, target, proto string
	major, minor          int
	header                http.Header
	host                  string
	contentLength         int64 // -1: chunked
	hasLength             bool  // a Content-Length header was sent
	chunked               bool
	close                 bool // no keep-alive after this request
	expectContinue        bool
}

// parseHead parses one request head s, every line ending in CRLF and the
// last one empty. It is strict where leniency lets two parsers disagree on
// where a request ends (request smuggling through the gateway to the
// sandbox): bare LF, obs-fold, whitespace before a colon, a Content-Length
// with Transfer-Encoding, differing or malformed Content-Lengths and any
// transfer coding but chunked are refused. s is one string the header keys
// and values are cut from, so a head costs few allocations.
func parseHead(s string) (*head, error) {
	line, rest, err := cutLine(s)
	if err != nil {
		return nil, err
	}
	h := &head{}
	var ok bool
	if h.method, line, ok = strings.Cut(line, " "); !ok || !IsToken(h.method) {
		return nil, bad("malformed request line")
	}
	if h.target, h.proto, ok = strings.Cut(line, " "); !ok || strings.IndexByte(h.proto, ' ') >= 0 {
		return nil, bad("malformed request line")
	}
	if h.target == "" {
		return nil, bad("empty request target")
	}
	switch h.proto {
	case "HTTP/1.1":
		h.major, h.minor = 1, 1
	case "HTTP/1.0":
		h.major, h.minor = 1, 0
	default:
		if h.major, h.minor, ok = http.ParseHTTPVersion(h.proto); !ok {
			return nil, bad("malformed HTTP version")
		}
		if h.major != 1 {
			return nil, &headError{status: http.StatusHTTPVersionNotSupported, msg: "unsupported HTTP version"}
		}
	}
	n := strings.Count(rest, "\n")
	h.header = make(http.Header, n)
	vals := make([]string, 0, n) // every first value, so a key costs no slice of its own
	hosts := 0
	var conn []string
	for {
		if line, rest, err = cutLine(rest); err != nil {
			return nil, err
		}
		if line == "" {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, bad("obsolete line folding")
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || !IsToken(k) {
			return nil, bad("malformed header line")
		}
		v = strings.Trim(v, " \t")
		if !validValue(v) {
			return nil, bad("invalid header value")
		}
		if !isCanonical(k) {
			k = http.CanonicalHeaderKey(k)
		}
		switch k {
		case "Host":
			hosts++
			h.host = v
			continue // net/http keeps Host out of the header map too
		case "Content-Length":
			if old, ok := h.header[k]; ok && old[0] != v {
				return nil, bad("conflicting Content-Length")
			}
		case "Transfer-Encoding":
			if _, ok := h.header[k]; ok {
				return nil, bad("repeated Transfer-Encoding")
			}
		case "Connection":
			conn = append(conn, v)
		}
		if old, ok := h.header[k]; ok {
			h.header[k] = append(old, v)
			continue
		}
		vals = append(vals, v)
		h.header[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if hosts > 1 || (hosts == 0 && h.minor >= 1) {
		return nil, bad("missing or repeated Host header")
	}
	// The bytes of an RFC 3986 authority, as net/http: no '@' (userinfo),
	// '#', '^', '`' or '|', which a token has and an authority has not.
	if !httpguts.ValidHostHeader(h.host) {
		return nil, bad("invalid Host header")
	}
	if err := h.framing(); err != nil {
		return nil, err
	}
	h.keepAlive(conn)
	if e, ok := h.header["Expect"]; ok {
		if len(e) != 1 || !equalFoldASCII(e[0], "100-continue") {
			return nil, &headError{status: http.StatusExpectationFailed, msg: "unsupported Expect"}
		}
		// An HTTP/1.0 client does not wait for a 100 Continue (RFC 9110 10.1.1).
		h.expectContinue = h.minor >= 1
		delete(h.header, "Expect")
	}
	return h, nil
}

// framing decides where the body ends: Content-Length, chunked, or none.
// A field sent empty counts as sent (and is malformed), as in net/http.
func (h *head) framing() error {
	te, hasTE := h.header["Transfer-Encoding"]
	length, hasLength := h.header["Content-Length"]
	if hasTE {
		if hasLength {
			return bad("both Content-Length and Transfer-Encoding")
		}
		if h.minor == 0 {
			return bad("Transfer-Encoding in an HTTP/1.0 request")
		}
		if !equalFoldASCII(te[0], "chunked") {
			return &headError{status: http.StatusNotImplemented, msg: "unsupported Transfer-Encoding"}
		}
		h.chunked, h.contentLength = true, -1
		delete(h.header, "Content-Length")
		return nil
	}
	if !hasLength {
		return nil
	}
	n, ok := parseLength(length[0])
	if !ok {
		return bad("malformed Content-Length")
	}
	h.contentLength, h.hasLength = n, true
	return nil
}

// keepAlive sets close from the protocol version and Connection tokens.
func (h *head) keepAlive(conn []string) {
	h.close = h.minor == 0
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			switch tok = strings.Trim(tok, " \t"); {
			case equalFoldASCII(tok, "close"):
				h.close = true
				return
			case equalFoldASCII(tok, "keep-alive") && h.minor == 0:
				h.close = false
			}
		}
	}
}

// request builds the http.Request of h (its body set by the caller).
func (h *head) request() (*http.Request, error) {
	r := &http.Request{Method: h.method, Proto: h.proto, ProtoMajor: h.major, ProtoMinor: h.minor,
		Header: h.header, Host: h.host, RequestURI: h.target, Close: h.close, ContentLength: h.contentLength}
	var err error
	switch {
	case h.method == http.MethodConnect && !strings.HasPrefix(h.target, "/"):
		// The authority form (RFC 9112 3.2.3), read as net/http reads it:
		// the authority is the request's host, whatever Host says.
		if r.URL, err = url.ParseRequestURI("http://" + h.target); err != nil {
			return nil, bad("malformed request target")
		}
		r.URL.Scheme, r.Host = "", r.URL.Host
	case h.target == "*":
		if h.method != http.MethodOptions {
			return nil, bad("* target outside OPTIONS")
		}
		r.URL = &url.URL{Path: "*"}
	default:
		if r.URL, err = url.ParseRequestURI(h.target); err != nil {
			return nil, bad("malformed request target")
		}
		if r.URL.Host != "" { // absolute form: its authority wins (RFC 9112 3.2.2)
			r.Host = r.URL.Host
		}
	}
	if h.chunked {
		r.TransferEncoding = []string{"chunked"}
	}
	return r, nil
}

var errBareLF = bad("line not ending in CRLF")

// cutLine cuts the first line off s; it must end in CRLF.
func cutLine(s string) (line, rest string, err error) {
	i := strings.IndexByte(s, '\n')
	if i < 0 {
		return "", "", bad("truncated head")
	}
	if i == 0 || s[i-1] != '\r' {
		return "", "", errBareLF
	}
	line = s[:i-1]
	if strings.IndexByte(line, '\r') >= 0 {
		return "", "", errBareLF
	}
	return line, s[i+1:], nil
}

// parseLength parses a Content-Length: decimal digits only, no sign, no
// list, at most 18 digits (no overflow).
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// tokenChars are the bytes of an RFC 9110 token.
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// IsToken reports whether s is an RFC 9110 token (a method, a field name).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}

// isCanonical reports whether k is already in http.CanonicalHeaderKey's form
// (the common case: no allocation for it).
func isCanonical(k string) bool {
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// equalFoldASCII is strings.EqualFold without Unicode folding, which
// would read "chun\u212aed" (a Kelvin sign) as chunked and "clo\u017fe" (a
// long s) as close where net/http and other parsers do not.
func equalFoldASCII(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lowerASCII(s[i]) != lowerASCII(t[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// validValue refuses control bytes but horizontal tab (RFC 9110 5.5).
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
