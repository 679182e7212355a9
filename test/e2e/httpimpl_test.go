package e2e

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestNetHTTPFallbackEndToEnd runs a gateway on both fallbacks
// (server_impl and transport_impl net/http) and drives real sandbox
// requests through it: exec, a file written and read back, an SSE stream.
// A head over max_header_bytes gets net/http's own 431, in its text (not
// the JSON serve answers): the proof that net/http's server read it.
func TestNetHTTPFallbackEndToEnd(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--server-impl", "net/http", "--transport-impl", "net/http", "--max-header-bytes", "4096")
	g := f.start()
	if !strings.Contains(g.logs.String(), "HTTP fallback in use") {
		t.Fatalf("no fallback warning at start:\n%s", tail(g.logs.String(), 20))
	}
	if out := shell(t, g.URL, "fallback", "echo hello from $((6*7))"); strings.TrimSpace(out.Output) != "hello from 42" {
		t.Fatalf("exec: %+v", out)
	}
	data := []byte("bytes\x00through\xffthe fallback\n")
	writeFileAPI(t, g.URL, "fallback", "/mnt/user-data/workspace/f.bin", data)
	code, body, _ := call(t, "POST", g.URL+"/threads/fallback/v1/file/read",
		map[string]any{"file": "/mnt/user-data/workspace/f.bin", "encoding": "base64"})
	if code != 200 || !strings.Contains(string(body), base64.StdEncoding.EncodeToString(data)) {
		t.Fatalf("read back: %d %s", code, body)
	}
	checkSSEStreams(t, f, g, "fallback-sse")

	c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: %s\r\n\r\n", strings.Repeat("a", 16<<10))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.HasPrefix(string(b), "431 Request Header Fields Too Large") {
		t.Fatalf("oversized head: %d %q, want net/http's 431", resp.StatusCode, b)
	}
}
