package serve

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// headSeeds are well-formed and borderline heads, the seed corpus of both
// head fuzz targets.
var headSeeds = []string{
	"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: keep-alive, close\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
	"GET http://h:1/p HTTP/1.0\r\nConnection: keep-alive\r\nx-lower: v\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
	"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
}

// FuzzParseHead: any head parses or is refused with a status, never a
// panic, and a parsed head frames its body one way only.
func FuzzParseHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHead(s)
		if err != nil {
			var he *headError
			if !errors.As(err, &he) || he.status < 400 || http.StatusText(he.status) == "" {
				t.Fatalf("error %v is not a head error with a status", err)
			}
			return
		}
		switch {
		case h.chunked && (h.contentLength != -1 || h.hasLength || h.header.Get("Content-Length") != ""):
			t.Fatalf("chunked with a length: %+v", h)
		case !h.chunked && h.contentLength < 0:
			t.Fatalf("negative length: %+v", h)
		case h.minor >= 1 && h.header.Get("Host") != "":
			t.Fatalf("Host left in the header map")
		}
		for k, vv := range h.header {
			if !IsToken(k) || k != http.CanonicalHeaderKey(k) {
				t.Fatalf("key %q", k)
			}
			for _, v := range vv {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("value %q", v)
				}
			}
		}
		if r, err := h.request(); err == nil && (r.URL == nil || r.Method != h.method) {
			t.Fatalf("request %+v", r)
		}
	})
}
