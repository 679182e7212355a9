package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// helloTimeout bounds how long a tunnel's client may take to send its TLS
// ClientHello once the tunnel is answered.
const helloTimeout = 10 * time.Second

// helloConn is a tunnel's client side while its ClientHello is read: reads
// come from r (the hijacked connection's buffer, then the connection) and
// are kept, to be sent upstream as they came; writes are dropped, so what
// the client gets back (an alert) is the proxy's decision, not crypto/tls's.
type helloConn struct {
	net.Conn
	r    io.Reader
	seen []byte
}

func (c *helloConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.seen = append(c.seen, b[:n]...)
	return n, err
}

func (c *helloConn) Write(b []byte) (int, error) { return len(b), nil }

// errHelloRead stops the handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// readClientHello reads the TLS ClientHello that opens a tunnel through
// crypto/tls's own parser (GetConfigForClient sees it, then the handshake
// is abandoned) and returns its server name ("" = none sent) and every
// byte read from the client. Anything else (plain HTTP, a protocol
// where the server speaks first) is an error.
func readClientHello(r io.Reader, conn net.Conn) (sni string, raw []byte, err error) {
	hc := &helloConn{Conn: conn, r: r}
	var hello *tls.ClientHelloInfo
	err = tls.Server(hc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errHelloRead
	}}).Handshake()
	if hello == nil {
		return "", hc.seen, fmt.Errorf("no TLS ClientHello: %w", err)
	}
	return hello.ServerName, hc.seen, nil
}

// TLS alerts the proxy sends a refused tunnel's client in place of the
// server's answer (RFC 8446 6.2): fatal, access_denied or
// unrecognized_name, in a record of the TLS 1.2 version every client reads.
var (
	alertAccessDenied     = []byte{21, 3, 3, 0, 2, 2, 49}
	alertUnrecognizedName = []byte{21, 3, 3, 0, 2, 2, 112}
)
