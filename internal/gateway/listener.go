package gateway

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// waitingListener hands net/http connections whose one-byte reads wait for
// the socket to become readable before reading.
//
// net/http starts a one-byte read on the client connection for every
// request (its "background read", which notices a client that hangs up
// while its request runs) and aborts it when the response is done. Go's
// netpoller reads first and waits second, so that read is a read(2) that
// fails with EAGAIN on every request: one syscall of the ~7 the gateway
// spends per proxied request (strace -c, bench proxy-throughput). Waiting
// first makes it free when the client neither sends nor closes.
//
// Only a one-byte read right after the read deadline was cleared waits
// first: that is net/http's background read (its other reads fill a 4 KiB
// buffer, and a request head is read under read_header_timeout, which is
// always set). Waiting first can miss readiness that arrived just before
// the wait began (the poller's edge is cleared when a read starts); for the
// background read that means a hang-up in the microseconds between the
// request head and the handler is seen when the response ends, not at once,
// and a pipelined request is read when the response ends, as it is anyway.
type waitingListener struct{ net.Listener }

func (l waitingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &waitingConn{TCPConn: tc, raw: raw}, nil
}

// waitingConn is a client connection of waitingListener.
type waitingConn struct {
	*net.TCPConn
	raw     syscall.RawConn
	cleared atomic.Bool // the read deadline was last set to none
}

func (c *waitingConn) SetReadDeadline(t time.Time) error {
	c.cleared.Store(t.IsZero())
	return c.TCPConn.SetReadDeadline(t)
}

func (c *waitingConn) SetDeadline(t time.Time) error {
	c.cleared.Store(t.IsZero())
	return c.TCPConn.SetDeadline(t)
}

func (c *waitingConn) Read(p []byte) (int, error) {
	if len(p) != 1 || !c.cleared.Load() {
		return c.TCPConn.Read(p)
	}
	var n int
	var rerr error
	waited := false
	err := c.raw.Read(func(fd uintptr) bool {
		if !waited {
			waited = true
			return false // wait for readiness first
		}
		n, rerr = syscall.Read(int(fd), p)
		return rerr != syscall.EAGAIN && rerr != syscall.EINTR
	})
	switch {
	case err != nil: // a deadline (net/http's abort) or a closed connection
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: rerr}
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}
