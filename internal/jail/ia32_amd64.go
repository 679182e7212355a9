//go:build linux

package jail

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

func forkIA32Syscall(nr, a1, a2, a3, a4, a5 uintptr) (pid int, errno uintptr)

// ia32Unshare is unshare(2) in the i386 syscall table.
const ia32Unshare = 310

// unshareIA32 calls unshare(flags) through the ia32 syscall ABI (int
// $0x80, the path around a filter that knows only the native one) in a
// child process: see IA32Syscall.
func unshareIA32(flags uintptr) (supported bool, err error) {
	return IA32Syscall(ia32Unshare, flags, 0, 0, 0, 0)
}

// IA32Syscall makes syscall nr (an i386 number) through the ia32 ABI in a
// child process. It returns the call's error (nil when it went through);
// supported is false when this kernel runs no ia32 code (the child died of
// the fault), which leaves nothing to refuse. The end-to-end probe of the
// jail (test/e2e/testdata/abiprobe) makes its calls with it too.
func IA32Syscall(nr, a1, a2, a3, a4, a5 uintptr) (supported bool, err error) {
	pid, errno := forkIA32Syscall(nr, a1, a2, a3, a4, a5)
	if errno != 0 {
		return true, fmt.Errorf("fork: %w", syscall.Errno(errno))
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return true, fmt.Errorf("wait: %w", err)
		}
		break
	}
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return true, nil
	case ws.Exited():
		return true, syscall.Errno(ws.ExitStatus())
	case ws.Signaled() && ws.Signal() == unix.SIGSEGV:
		return false, nil
	case ws.Signaled() && ws.Signal() == unix.SIGSYS:
		return true, fmt.Errorf("killed by %v", ws.Signal())
	}
	return true, fmt.Errorf("child ended with status %#x", uint32(ws))
}
