package proxy

import (
	"net"
	"syscall"
)

// peerOpen reports whether an idle connection is still open on the other
// side: a non-blocking peek sees EOF once the sandbox closed it (or died).
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, errno := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, still open. 0 bytes: EOF. Data on an idle
		// HTTP/1.1 connection is a protocol error: drop it too.
		open = errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && open
}
