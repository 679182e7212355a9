package serve

import (
	"bufio"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// smugglingSeeds are the classic request-smuggling heads: each is a place
// where two HTTP/1.1 parsers have been known to disagree on where a request
// ends or what it is.
var smugglingSeeds = []string{
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n",    // CL.TE
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n",    // TE.CL
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n", // TE.TE
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chun\u212aed\r\n\r\n", // Kelvin sign: folds to k in Unicode
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length:  5 \r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\x00\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x y\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nConnection: clo\u017fe\r\n\r\n", // long s: folds to s in Unicode
	"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, x\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET / HTTP/1.1 \r\nHost: x\r\n\r\n",
	"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
	"CONNECT a:1 HTTP/1.1\r\nHost: b\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
}

// serveStricter lists, by serve's own message, every refusal of serve
// that net/http's server accepts, and why serve refuses. Any other
// disagreement fails FuzzDifferential.
var serveStricter = map[string]string{
	// net/http ends a line at a bare LF; a front proxy that ends lines at
	// CRLF only sees another line structure, hence other headers.
	errBareLF.msg: "bare LF or CR in a line",
	// net/http unfolds obs-fold into the previous value; RFC 9112 5.2 lets
	// a server refuse it instead, and parsers unfold differently.
	"obsolete line folding": "obs-fold",
	// net/http drops the Content-Length and reads chunked (RFC 9112 6.3);
	// the pair is the CL.TE / TE.CL smuggling vector, refused outright.
	"both Content-Length and Transfer-Encoding": "CL with TE",
	// net/http ignores Transfer-Encoding in HTTP/1.0 and frames by
	// Content-Length; an HTTP/1.0 hop before the gateway may frame the
	// other way.
	"Transfer-Encoding in an HTTP/1.0 request": "TE in HTTP/1.0",
	// net/http takes up to 2^63-1 and a length padded with whitespace
	// inside a list element; serve takes 18 digits (no overflow anywhere).
	"malformed Content-Length": "Content-Length over 18 digits",
	// net/http hands any method with an asterisk target to the handler;
	// only OPTIONS has the asterisk form (RFC 9112 3.2.4).
	"* target outside OPTIONS": "asterisk target",
	// net/http exempts CONNECT from the Host requirement; RFC 9112 3.2
	// does not.
	"missing or repeated Host header": "CONNECT without Host",
	// net/http accepts an Expect list holding 100-continue among others;
	// serve knows only the one expectation.
	"unsupported Expect": "Expect list",
	// net/http reads an empty CONNECT target as an empty authority; no
	// request form is empty (RFC 9112 3.2).
	"empty request target": "CONNECT with no target",
	// net/http hands "PRI * HTTP/2.0" to the handler (h2c prior
	// knowledge); the gateway speaks HTTP/1.x only.
	"unsupported HTTP version": "HTTP/2.0 preface",
}

// FuzzDifferential feeds the same bytes to serve's head parser and to
// net/http's (http.ReadRequest plus the checks http.Server adds): serve may
// refuse more, for a listed reason only (serveStricter), never less, and
// where both accept a head they agree on what the request is and where it
// ends. A disagreement there is request smuggling or a misrouted request
// once serve sits behind or in front of a net/http parser (the
// server_impl: net/http fallback is one).
func FuzzDifferential(f *testing.F) {
	for _, s := range headSeeds {
		f.Add(s)
	}
	for _, s := range smugglingSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ours, oursErr := serveRequest(s)
		std, stdErr := stdRequest(s)
		switch {
		case oursErr != nil && stdErr != nil:
			return
		case oursErr != nil:
			var he *headError
			if !errors.As(oursErr, &he) {
				t.Fatalf("serve: %v, not a head error", oursErr)
			}
			if _, ok := serveStricter[he.msg]; !ok {
				t.Fatalf("serve refuses (%v) a head net/http accepts (%s %q Host %q), for no listed reason:\n%q",
					oursErr, std.Method, std.RequestURI, std.Host, s)
			}
			return
		case stdErr != nil:
			t.Fatalf("serve accepts a head net/http refuses (%v):\n%q", stdErr, s)
		}
		for _, d := range []struct {
			what      string
			ours, std any
		}{
			{"method", ours.Method, std.Method},
			{"target", ours.RequestURI, std.RequestURI},
			{"host", ours.Host, std.Host},
			{"content length", ours.ContentLength, std.ContentLength},
			{"chunked", isChunked(ours), isChunked(std)},
			{"close", ours.Close, std.Close},
		} {
			if d.ours != d.std {
				t.Fatalf("%s: serve %v, net/http %v:\n%q", d.what, d.ours, d.std, s)
			}
		}
	})
}

// serveRequest is what the server makes of the first head in s: readHead
// ends a head at its first empty line, CRLF or bare LF.
func serveRequest(s string) (*http.Request, error) {
	end := -1
	for i := 0; i < len(s); {
		n := strings.IndexByte(s[i:], '\n')
		if n < 0 {
			break
		}
		if line := s[i : i+n+1]; line == "\n" || line == "\r\n" {
			end = i + n + 1
			break
		}
		i += n + 1
	}
	if end < 0 {
		return nil, bad("truncated head")
	}
	h, err := parseHead(s[:end])
	if err != nil {
		return nil, err
	}
	return h.request()
}

// stdRequest is what net/http's server makes of s: http.ReadRequest, then
// the checks of http.Server's readRequest and of its Expect handling.
func stdRequest(s string) (*http.Request, error) {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(s)))
	if err != nil {
		return nil, err
	}
	h2Upgrade := r.Method == "PRI" && r.RequestURI == "*" && r.ProtoMajor == 2 && r.ProtoMinor == 0
	if r.ProtoMajor != 1 && !h2Upgrade {
		return nil, errors.New("unsupported protocol version")
	}
	// ReadRequest drops the Host field the server checks: read it again.
	tp := textproto.NewReader(bufio.NewReader(strings.NewReader(s)))
	_, _ = tp.ReadLine()
	fields, _ := tp.ReadMIMEHeader()
	hosts, haveHost := fields["Host"]
	if r.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && !h2Upgrade && r.Method != http.MethodConnect {
		return nil, errors.New("missing required Host header")
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return nil, errors.New("malformed Host header")
	}
	for k, vv := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, errors.New("invalid header name")
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, errors.New("invalid header value")
			}
		}
	}
	if e := r.Header.Get("Expect"); e != "" && !httpguts.HeaderValuesContainsToken([]string{e}, "100-continue") {
		return nil, errors.New("expectation failed")
	}
	return r, nil
}

func isChunked(r *http.Request) bool {
	return len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
}
