//go:build linux && amd64

// Command abiprobe makes the calls of issue 33's finding 2 and prints, one
// line each, "<call>: ok" or "<call>: <errno name>" through the native
// write(2): unshare(CLONE_NEWUSER|CLONE_NEWNET|CLONE_NEWNS) and getpid
// through int $0x80 (the ia32 ABI, which a 64-bit process may use), and
// io_uring_setup on the native ABI. The e2e test runs it inside a jailed
// sandbox and, as the control that the probe itself works, on the host.
package main

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

func forkIA32(nr, a1, a2, a3 uintptr) (pid int, errno uintptr)

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
	pid, errno := forkIA32(nr, a1, 0, 0)
	if errno != 0 {
		return "fork " + unix.ErrnoName(unix.Errno(errno))
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return "wait " + err.Error()
		}
		break
	}
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return "ok"
	case ws.Exited():
		return unix.ErrnoName(unix.Errno(ws.ExitStatus()))
	case ws.Signaled():
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("status %#x", uint32(ws))
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
