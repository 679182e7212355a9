//go:build linux && amd64

// Command abiprobe makes the calls of issue 33's finding 2 and prints, one
// line each, "<call>: ok" or "<call>: <errno name>" through the native
// write(2): unshare(CLONE_NEWUSER|CLONE_NEWNET|CLONE_NEWNS) and getpid
// through int $0x80 (the ia32 ABI, which a 64-bit process may use), and
// io_uring_setup on the native ABI. The e2e test runs it inside a jailed
// sandbox and, as the control that the probe itself works, on the host.
package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/jail"
)

// i386 syscall numbers.
const (
	ia32Getpid  = 20
	ia32Unshare = 310
)

func main() {
	fmt.Println("ia32_getpid:", ia32(ia32Getpid, 0))
	fmt.Println("ia32_unshare:", ia32(ia32Unshare, unix.CLONE_NEWUSER|unix.CLONE_NEWNET|unix.CLONE_NEWNS))
	fmt.Println("io_uring_setup:", ioUringSetup())
}

// ia32 is the outcome of syscall nr through int $0x80 in a child.
func ia32(nr, a1 uintptr) string {
	supported, err := jail.IA32Syscall(nr, a1, 0, 0, 0, 0)
	if !supported {
		return "no ia32 ABI"
	}
	if errno, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(errno)
	}
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// ioUringSetup is io_uring_setup(1, &params) on the native ABI; a ring it
// gets is closed at once.
func ioUringSetup() string {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	if errno != 0 {
		return unix.ErrnoName(errno)
	}
	unix.Close(int(fd))
	return "ok"
}
