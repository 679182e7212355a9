package e2e

import (
	"bufio"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSandboxDestroyedMidUploadIs502: a sandbox destroyed while an upload streams into it
// answers the upload from the error table (502/503), never 500, and the
// gateway goes on serving the thread.
func TestSandboxDestroyedMidUploadIs502(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	const thread = "fault500-upload"
	shell(t, g.URL, thread, "true")

	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	started := make(chan struct{})
	go func() {
		part, err := mw.CreateFormFile("file", "big.bin")
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		chunk := make([]byte, 64<<10)
		for i := 0; ; i++ {
			if _, err := part.Write(chunk); err != nil {
				return // the gateway gave up on the body: the test's point
			}
			if i == 16 {
				close(started)
			}
			if i > 16 {
				time.Sleep(20 * time.Millisecond)
			}
			if i > 2000 {
				_ = mw.Close()
				_ = pw.Close()
				return
			}
		}
	}()
	req, _ := http.NewRequest("POST", g.URL+"/threads/"+thread+"/v1/file/upload", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	type answer struct {
		code int
		body string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := g.client.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- answer{code: resp.StatusCode, body: string(b)}
	}()
	<-started
	time.Sleep(200 * time.Millisecond)
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/"+thread+"/sandbox?destroy=true", nil); code/100 != 2 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("upload not answered 30 s after the destroy")
	}
	pw.CloseWithError(io.ErrClosedPipe)
	if a.err == nil {
		t.Logf("upload answered %d %s", a.code, a.body)
		if a.code == http.StatusInternalServerError || a.code < 400 {
			t.Fatalf("upload during destroy: %d %s; want an error-table status, not 500", a.code, a.body)
		}
	} else {
		// The client may see the connection close before it reads the answer.
		t.Logf("upload connection closed: %v", a.err)
	}
	if !strings.Contains(g.logs.String(), `"path":"/threads/`+thread+`/v1/file/upload","status":502`) {
		t.Fatalf("the upload was not answered 502:\n%s", tail(g.logs.String(), 30))
	}
	if strings.Contains(g.logs.String(), `"status":500`) {
		t.Fatalf("gateway logged a 500:\n%s", tail(g.logs.String(), 30))
	}
	if out := shell(t, g.URL, thread, "echo alive"); strings.TrimSpace(out.Output) != "alive" {
		t.Fatalf("after the destroy: %q", out.Output)
	}
}

// TestChunkedBodyWithBareLineFeedsIs400: a chunked body framed with bare line feeds is a
// malformed request: 400, and the gateway goes on serving.
func TestChunkedBodyWithBareLineFeedsIs400(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	const thread = "fault500-lf"
	shell(t, g.URL, thread, "true")
	addr := strings.TrimPrefix(g.URL, "http://")
	for _, tc := range []struct{ name, head, body string }{
		{"bare LF chunk lines", "POST /threads/" + thread + "/v1/shell/exec HTTP/1.1\r\nHost: " + addr +
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", "14\n{\"command\":\"true\"}  \n0\n\n"},
		{"bare LF headers too", "POST /threads/" + thread + "/v1/shell/exec HTTP/1.1\nHost: " + addr +
			"\nContent-Type: application/json\nTransfer-Encoding: chunked\n\n", "14\n{\"command\":\"true\"}  \n0\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := io.WriteString(conn, tc.head+tc.body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("%d %s", resp.StatusCode, b)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d %s, want 400", resp.StatusCode, b)
			}
		})
	}
	if strings.Contains(g.logs.String(), `"status":500`) {
		t.Fatalf("gateway logged a 500:\n%s", tail(g.logs.String(), 30))
	}
	if out := shell(t, g.URL, thread, "echo alive"); strings.TrimSpace(out.Output) != "alive" {
		t.Fatalf("after: %q", out.Output)
	}
}
