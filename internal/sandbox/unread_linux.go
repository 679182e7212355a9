package sandbox

import (
	"os"
	"syscall"
	"unsafe"
)

// unread reports how many bytes wait in the pipe behind f (FIONREAD). It
// goes through SyscallConn, because f.Fd() would switch the pipe to
// blocking mode under its reader.
func unread(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		var v int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v))); e == 0 {
			n = int(v)
		}
	})
	return n
}
