//go:build linux

package jail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// installSeccomp loads program, the filter the gateway compiled once
// (package seccompfilter, handed over in Spec.Seccomp), on every thread
// (TSYNC), setting no_new_privs first, which loading a filter without
// CAP_SYS_ADMIN needs. Filters survive fork and execve, so every process of
// the sandbox has it.
//
// It fails closed, and the sandbox then does not serve: no program, a
// malformed one, one the kernel refuses, or one that lets unshare or setns
// through on the native ABI, or unshare through the ia32 one (run in a BPF
// interpreter, and made with int $0x80 in a child where the kernel has
// ia32 emulation: the filter refuses every call of another ABI; a check of
// a few syscalls that catches a filter swapped for a weaker one).
func installSeccomp(program []byte) error {
	if len(program) == 0 || len(program)%8 != 0 || len(program)/8 > unix.BPF_MAXINSNS {
		return fmt.Errorf("seccomp: no valid filter program (%d bytes)", len(program))
	}
	filter := parseFilter(program)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if e != 0 {
		return fmt.Errorf("seccomp: load filter: %w", e)
	}
	if r != 0 { // TSYNC: the id of a thread that could not take it
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	if err := unix.Unshare(0); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("seccomp: the filter lets unshare through (%v)", err)
	}
	if err := unix.Setns(-1, 0); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("seccomp: the filter lets setns through (%v)", err)
	}
	if refused, err := ia32UnshareRefused(filter); err != nil || !refused {
		return fmt.Errorf("seccomp: the filter lets ia32 unshare through (interpreted: %v)", err)
	}
	if supported, err := unshareIA32(unix.CLONE_NEWUSER); supported && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("seccomp: the filter lets ia32 unshare through (%v)", err)
	}
	return nil
}

// parseFilter reads program (struct sock_filter in the machine's order,
// 8 bytes each) into instructions.
func parseFilter(program []byte) []unix.SockFilter {
	filter := make([]unix.SockFilter, len(program)/8)
	for i := range filter {
		in := program[8*i:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	return filter
}
