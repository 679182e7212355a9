package serve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkServe is one keep-alive small GET through this server and
// through net/http's, same handler, over loopback: its allocs/op and B/op
// are the server's per-request cost (the client side allocates nothing).
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"success":true,"data":{}}`)
	})
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) (stop func())
	}{
		{"serve", func(l net.Listener) func() {
			s := &Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = s.Serve(l) }()
			return func() { _ = s.Close() }
		}},
		{"net-http", func(l net.Listener) func() {
			s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = s.Serve(l) }()
			return func() { _ = s.Close() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer tc.serve(l)()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte("GET /threads/t/v1/sandbox HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
			br := bufio.NewReader(c)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				// Head and a 26-byte body: read to the body's last byte.
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					if len(line) == 2 {
						break
					}
				}
				if _, err := br.Discard(26); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
