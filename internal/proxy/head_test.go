package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// headLines is a request head's lines, the request line first and the
// fields sorted (appendHead keeps the map's order, req.Write sorts).
func headLines(t *testing.T, head []byte) []string {
	t.Helper()
	text, ok := strings.CutSuffix(string(head), "\r\n\r\n")
	if !ok {
		t.Fatalf("head %q does not end with an empty line", head)
	}
	lines := strings.Split(text, "\r\n")
	slices.Sort(lines[1:])
	return lines
}

// TestAppendHeadIsReqWrite: for the requests it takes, appendHead writes
// the very lines req.Write does, and a server reads the same request from
// both; the rest it leaves to req.Write.
func TestAppendHeadIsReqWrite(t *testing.T) {
	t.Parallel()
	get := func(target string, edit func(r *http.Request)) *http.Request {
		r, err := http.NewRequest(http.MethodGet, target, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Accept", "application/json")
		if edit != nil {
			edit(r)
		}
		return r
	}
	for _, c := range []struct {
		name  string
		req   *http.Request
		taken bool // appendHead writes it (else req.Write)
	}{
		{"plain GET", get("http://127.0.0.1:8080/v1/sandbox", nil), true},
		{"query", get("http://127.0.0.1:8080/v1/file/read?path=%2Fmnt%2Fx&n=1", nil), true},
		{"forced empty query", get("http://127.0.0.1:8080/v1/x?", nil), true},
		{"escaped path kept", get("http://127.0.0.1:8080/v1/file/a%2Fb%20c", nil), true},
		{"empty path", get("http://127.0.0.1:8080", nil), true},
		{"no User-Agent field: Go's", get("http://h/v1", func(r *http.Request) { delete(r.Header, "User-Agent") }), true},
		{"empty User-Agent: none", get("http://h/v1", func(r *http.Request) { r.Header["User-Agent"] = []string{""} }), true},
		{"User-Agent: the first", get("http://h/v1", func(r *http.Request) { r.Header["User-Agent"] = []string{"a/1", "b/2"} }), true},
		{"Host field and Host", get("http://h/v1", func(r *http.Request) { r.Host = "other:81"; r.Header["Host"] = []string{"x"} }), true},
		{"many values, blanks and a CR LF", get("http://h/v1", func(r *http.Request) {
			r.Header["X-Forwarded-For"] = []string{"203.0.113.9, 127.0.0.1"}
			r.Header["X-Multi"] = []string{"1", " 2 ", "3\r\nX-Injected: 1"}
			r.Header["Content-Length"] = []string{"0"}
		}), true},
		{"HEAD", get("http://h/v1", func(r *http.Request) { r.Method = http.MethodHead }), true},
		{"DELETE", get("http://h/v1", func(r *http.Request) { r.Method = http.MethodDelete }), true},
		{"OPTIONS", get("http://h/v1", func(r *http.Request) { r.Method = http.MethodOptions }), true},
		{"POST announces its empty body", get("http://h/v1", func(r *http.Request) { r.Method = http.MethodPost }), false},
		{"a body", get("http://h/v1", func(r *http.Request) {
			r.Body, r.ContentLength = http.NoBody, 3
		}), false},
		{"chunked", get("http://h/v1", func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), false},
		{"close", get("http://h/v1", func(r *http.Request) { r.Close = true }), false},
		{"trailer", get("http://h/v1", func(r *http.Request) { r.Trailer = http.Header{"X-T": nil} }), false},
		{"zoned host", get("http://h/v1", func(r *http.Request) { r.Host = "[fe80::1%25en0]:80" }), false},
		{"host that needs punycode", get("http://h/v1", func(r *http.Request) { r.Host = "bücher.example" }), false},
		{"control byte in the query", get("http://h/v1", func(r *http.Request) { r.URL.RawQuery = "a=\x01" }), false},
		{"opaque URL", get("http://h/v1", func(r *http.Request) { r.URL = &url.URL{Scheme: "http", Opaque: "//h/v1"} }), false},
	} {
		head, taken := appendHead(nil, c.req)
		if taken != c.taken {
			t.Errorf("%s: taken %v, want %v", c.name, taken, c.taken)
			continue
		}
		if !taken {
			if len(head) != 0 {
				t.Errorf("%s: not taken, yet %q appended", c.name, head)
			}
			continue
		}
		var std bytes.Buffer
		if err := c.req.Write(&std); err != nil {
			t.Fatalf("%s: req.Write: %v", c.name, err)
		}
		if got, want := headLines(t, head), headLines(t, std.Bytes()); !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, want)
		}
		read, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("%s: a server cannot read %q: %v", c.name, head, err)
		}
		if read.Header.Get("X-Injected") != "" {
			t.Errorf("%s: a CR LF in a value forged a field: %q", c.name, head)
		}
	}
}

// TestAppendHeadDropsFieldsThatAreNoTokens: a field name that is no token
// (which no client can send through the gateway's server, but a map can
// hold) is not written: it could carry a field of its own.
func TestAppendHeadDropsFieldsThatAreNoTokens(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest(http.MethodGet, "http://h/v1", nil)
	r.Header["X-Ok"] = []string{"1"}
	r.Header["X-Bad: 1\r\nX-Injected"] = []string{"2"}
	head, taken := appendHead(nil, r)
	if !taken || !bytes.Contains(head, []byte("X-Ok: 1\r\n")) || bytes.Contains(head, []byte("X-Injected")) {
		t.Fatalf("head %q (taken %v)", head, taken)
	}
}

// BenchmarkAppendHead against req.Write, on a proxied GET's head.
func BenchmarkAppendHead(b *testing.B) {
	r, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080/v1/sandbox", nil)
	for k, v := range map[string]string{"Accept": "*/*", "User-Agent": "", "X-Forwarded-For": "127.0.0.1",
		"X-Forwarded-Host": "127.0.0.1:18080", "X-Forwarded-Proto": "http", "X-Aio-Api-Key": "k", "X-Sandgate-Caller": "user:default"} {
		r.Header.Set(k, v)
	}
	w := bufio.NewWriterSize(discard{}, writeBufSize)
	for _, c := range []struct {
		name  string
		write func() error
	}{
		{"appendHead", func() error { return writeRequest(w, r) }},
		{"req.Write", func() error { return r.Write(w) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.write(); err != nil {
					b.Fatal(err)
				}
				w.Reset(discard{})
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
