package serve

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
)

// ConnLimits cap the client connections a gateway holds open, so that
// clients that open connections and stall (a request head or body trickled,
// or nothing sent) cannot take every file descriptor of the process, and
// so its health checks, other clients and its own sandbox connections. The
// zero value is the documented default.
type ConnLimits struct {
	// Max is the most client connections open at once; past it Accept
	// waits (new connections queue in the kernel's backlog, holding no
	// descriptor of the gateway). 0 = half the process's descriptor limit
	// (RLIMIT_NOFILE): the other half is for sandbox connections, Redis and
	// files.
	Max int
	// PerSource is the most of them one source address holds (an IPv6
	// source counts by its /64, which one host is given whole); a
	// connection past it is closed at once. 0 = a quarter of Max. Behind a
	// load balancer, every client has the balancer's address: raise it to
	// Max there.
	PerSource int
}

// Validate names the first bad setting.
func (l ConnLimits) Validate() error {
	if l.Max < 0 {
		return errors.New("max_connections: must be 0 (the default) or positive")
	}
	if l.PerSource < 0 {
		return errors.New("max_connections_per_source: must be 0 (the default) or positive")
	}
	return nil
}

// Effective resolves the defaults against the process's descriptor limit.
func (l ConnLimits) Effective() ConnLimits {
	if l.Max == 0 {
		l.Max = 512 // where the limit cannot be read
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
			l.Max = int(min(rl.Cur/2, 1<<20))
		}
		l.Max = max(l.Max, 1)
	}
	if l.PerSource == 0 {
		l.PerSource = max(l.Max/4, 1)
	}
	return l
}

// LimitListener caps the connections l hands out at limits (defaults
// resolved): a connection counts until it is closed.
func LimitListener(l net.Listener, limits ConnLimits) net.Listener {
	limits = limits.Effective()
	return &limitListener{Listener: l, limits: limits, slots: make(chan struct{}, limits.Max),
		bySource: map[netip.Addr]int{}, done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	limits ConnLimits
	slots  chan struct{} // one per open connection: a send waits at Max
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	bySource map[netip.Addr]int // entries at 0 are removed
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		src := sourceOf(c.RemoteAddr())
		if !l.admit(src) {
			// Closed at once: the source holds its share, and a stalled
			// client must not take the descriptors of everyone else.
			_ = c.Close()
			<-l.slots
			continue
		}
		return &limitedConn{Conn: c, l: l, src: src}, nil
	}
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *limitListener) admit(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySource[src] >= l.limits.PerSource {
		return false
	}
	l.bySource[src]++
	return true
}

func (l *limitListener) release(src netip.Addr) {
	l.mu.Lock()
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
	l.mu.Unlock()
	<-l.slots
}

// sourceOf is the address a connection counts against: its IP, an IPv6
// one cut to its /64.
func sourceOf(a net.Addr) netip.Addr {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{} // not TCP (a Unix socket): one shared source
	}
	ip, _ := netip.AddrFromSlice(t.IP)
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// limitedConn gives its slot back once, on its first Close.
type limitedConn struct {
	net.Conn
	l    *limitListener
	src  netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// vectored is where net.Buffers writes c's data in one writev: it does so
// only on a connection of the net package, so a limitedConn (which changes
// nothing but Close) gives the connection it wraps.
func vectored(c net.Conn) io.Writer {
	if lc, ok := c.(*limitedConn); ok {
		return lc.Conn
	}
	return c
}

// String is for logs: the limits in effect.
func (l ConnLimits) String() string {
	return fmt.Sprintf("%d (%d per source)", l.Max, l.PerSource)
}
