//go:build linux

package jail

import (
	"errors"
	"fmt"
	"unsafe"

	"kernel.org/pub/linux/libs/security/libcap/psx"

	"golang.org/x/sys/unix"
)

// lockedSecurebits keeps capabilities from coming back and locks that in:
// uid 0 gains none on execve (NOROOT), setuid changes no capability set
// (NO_SETUID_FIXUP), KEEP_CAPS stays off, and no ambient capability may be
// raised. See capabilities(7) and linux/securebits.h.
const lockedSecurebits = 1<<0 | 1<<1 | // SECBIT_NOROOT, _LOCKED
	1<<2 | 1<<3 | // SECBIT_NO_SETUID_FIXUP, _LOCKED
	1<<5 | // SECBIT_KEEP_CAPS_LOCKED (with KEEP_CAPS off)
	1<<6 | 1<<7 // SECBIT_NO_CAP_AMBIENT_RAISE, _LOCKED

// dropPrivileges leaves the process with no capability and no way to gain
// one: ambient set cleared, bounding set emptied, securebits locked,
// effective, permitted and inheritable sets zeroed, no_new_privs set.
// Capabilities, securebits and no_new_privs belong to a thread, not the
// process, so every step runs on all of the Go runtime's threads
// (libcap's psx, kept by the libcap maintainers: Go's own
// syscall.AllThreadsSyscall where cgo is off, libpsx where it is on, as in a
// plain `go run ./cmd/gateway`). The bounding set and the
// securebits need CAP_SETPCAP, which the last steps give up.
func dropPrivileges() error {
	if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; ; c++ {
		// PR_CAPBSET_READ fails with EINVAL past the kernel's last
		// capability, which saves depending on /proc.
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); errors.Is(err, unix.EINVAL) {
			break
		}
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c)); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := allThreadsPrctl(unix.PR_SET_SECUREBITS, lockedSecurebits); err != nil {
		return fmt.Errorf("lock securebits: %w", err)
	}
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{}
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(data)), 0); e != 0 {
		return fmt.Errorf("capset to none: %w", e)
	}
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// allThreadsPrctl runs prctl(option, arg, 0, 0, 0) on every thread; the
// zeros matter, several options refuse other values.
func allThreadsPrctl(option int, arg uintptr) error {
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, uintptr(option), arg, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}
