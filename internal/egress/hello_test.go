package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// TestConnectSNIMustMatch is issue 33's domain fronting: a tunnel allowed
// for one name carries a ClientHello for another (a shared host, a CDN,
// serves both). The proxy reads the ClientHello before it dials and ends
// a tunnel whose server name differs, is missing, or that is not TLS at
// all; the upstream never sees a connection (it counts them).
func TestConnectSNIMustMatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	plainHTTP := []byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	for _, c := range []struct {
		name   string
		hello  []byte
		early  bool // sent with the CONNECT, before its 200
		reason string
		alert  []byte
	}{
		{"other name", clientHello(t, "other.test"), false, ReasonSNIMismatch, alertAccessDenied},
		{"other name early", clientHello(t, "other.test"), true, ReasonSNIMismatch, alertAccessDenied},
		{"name below", clientHello(t, "x.allowed.test"), false, ReasonSNIMismatch, alertAccessDenied},
		{"no name", clientHello(t, ""), false, ReasonNoSNI, alertUnrecognizedName},
		{"plain http", plainHTTP, false, ReasonNotTLS, nil},
		{"plain http early", plainHTTP, true, ReasonNotTLS, nil},
		{"cut short", clientHello(t, "allowed.test")[:20], false, ReasonNotTLS, nil},
		{"same name", clientHello(t, "allowed.test"), false, ReasonOK, nil},
		{"same name other case", clientHello(t, "Allowed.TEST"), false, ReasonOK, nil},
		{"same name early", clientHello(t, "allowed.test"), true, ReasonOK, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := startCountingUpstream(t)
			f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
			conn, err := net.Dial("unix", f.socket)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			req := connect(fmt.Sprintf("allowed.test:%d", up.port()))
			if c.early {
				req += string(c.hello)
			}
			io.WriteString(conn, req)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			if !c.early {
				conn.Write(c.hello)
			}
			conn.(*net.UnixConn).CloseWrite() // the echo upstream answers at EOF
			got, _ := io.ReadAll(br)
			if c.reason == ReasonOK {
				if !bytes.Equal(got, c.hello) || up.accepted.Load() != 1 {
					t.Fatalf("allowed tunnel: upstream got %d connection(s); echoed %d bytes of %d", up.accepted.Load(), len(got), len(c.hello))
				}
				if r := up.received(); len(r) != 1 || !bytes.Equal(r[0], c.hello) {
					t.Fatal("the upstream did not get the ClientHello as the client sent it")
				}
				return
			}
			if !bytes.Equal(got, c.alert) {
				t.Fatalf("client got %x, want %x", got, c.alert)
			}
			if n := up.accepted.Load(); n != 0 {
				t.Fatalf("upstream got %d connection(s) from a refused tunnel", n)
			}
			if d := f.dials.all(); len(d) != 0 {
				t.Fatalf("dialled %v", d)
			}
			lines := f.logs.waitLines(t, 1)
			if len(lines) != 1 || lines[0]["decision"] != "deny" || lines[0]["reason"] != c.reason || lines[0]["host"] != "allowed.test" {
				t.Fatalf("log lines %v", lines)
			}
			if strings.Contains(fmt.Sprint(lines[0]["err"]), "127.0.0.2") {
				t.Fatalf("log names the upstream address: %v", lines[0])
			}
			if d := f.rec.all(); len(d) != 1 || d[0] != "deny/"+c.reason {
				t.Fatalf("recorded %v", d)
			}
		})
	}
}

// TestConnectFrontingRealClient: crypto/tls asked for another name
// through a tunnel allowed for allowed.test gets an access_denied alert,
// and the TLS server behind it no connection.
func TestConnectFrontingRealClient(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	up := startCountingUpstream(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	conn, br := connectOnly(t, f, fmt.Sprintf("allowed.test:%d", up.port()))
	tc := tls.Client(readerConn{conn, br}, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	err := tc.Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("handshake through a fronted tunnel: %v, want access denied", err)
	}
	if n := up.accepted.Load(); n != 0 || len(f.dials.all()) != 0 {
		t.Fatalf("upstream got %d connection(s), dials %v", n, f.dials.all())
	}
}

// connectOnly opens a tunnel and reads its 200, sending nothing more.
func connectOnly(t testing.TB, f *fixture, authority string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, connect(authority))
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", authority, resp, err)
	}
	return conn, br
}

// readerConn reads through the bufio.Reader that read the CONNECT answer.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }
