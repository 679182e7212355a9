//go:build linux

package jail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/net/bpf"
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

// ia32UnshareRefused runs filter in a BPF interpreter on unshare through
// the ia32 ABI and reports whether it answers EPERM. A kernel without ia32
// emulation faults int $0x80 before any filter is asked, so unshareIA32
// cannot tell a filter that would let the call through there; the
// interpreter can, on every kernel.
func ia32UnshareRefused(filter []unix.SockFilter) (bool, error) {
	vm, err := filterInterpreter(filter)
	if err != nil {
		return false, err
	}
	action, err := vm.Run(seccompInput(unix.AUDIT_ARCH_I386, ia32Unshare, unix.CLONE_NEWUSER))
	return uint32(action) == unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM), err
}

// filterInterpreter is a BPF interpreter running filter.
func filterInterpreter(filter []unix.SockFilter) (*bpf.VM, error) {
	raw := make([]bpf.RawInstruction, len(filter))
	for i, f := range filter {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, errors.New("an instruction the interpreter does not know")
	}
	return bpf.NewVM(insts)
}

// seccompInput is struct seccomp_data (nr, arch, ip, six arguments) for
// the interpreter, which loads words big-endian where the kernel loads
// them in the machine's order: all zero but nr, arch and the first
// argument's low word.
func seccompInput(auditArch, nr, arg0 uint32) []byte {
	d := make([]byte, 64)
	binary.BigEndian.PutUint32(d[0:], nr)
	binary.BigEndian.PutUint32(d[4:], auditArch)
	binary.BigEndian.PutUint32(d[16:], arg0)
	return d
}
