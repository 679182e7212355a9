package earlydrop

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// lockedSecurebits keeps capabilities from coming back and locks that in:
// uid 0 gains none on execve (NOROOT), setuid changes no capability set
// (NO_SETUID_FIXUP), KEEP_CAPS stays off, and no ambient capability may be
// raised. See capabilities(7) and linux/securebits.h.
const lockedSecurebits = 1<<0 | 1<<1 | // SECBIT_NOROOT, _LOCKED
	1<<2 | 1<<3 | // SECBIT_NO_SETUID_FIXUP, _LOCKED
	1<<5 | // SECBIT_KEEP_CAPS_LOCKED (with KEEP_CAPS off)
	1<<6 | 1<<7 // SECBIT_NO_CAP_AMBIENT_RAISE, _LOCKED

// early is the outcome of the drop at start-up: done, or why not (nil and
// not done: this process is not a sandbox init).
var early struct {
	done bool
	err  error
}

// atEntry is set by entry (entry_linux_amd64.s), before the runtime starts,
// once it has made every one of drop's calls: on the one thread there was,
// so on every thread since.
var atEntry bool

// The sandbox init is PID 1 of its PID namespace, started as
// `sandgate sandbox-init`.
func init() {
	if atEntry {
		early.done = true
		return
	}
	if !withCgo && len(os.Args) == 2 && os.Args[1] == Command && os.Getpid() == 1 {
		early.err = drop()
		early.done = early.err == nil
	}
}

// AtEntry reports whether the program's entry point did Drop's work,
// before the Go runtime started (see entry).
func AtEntry() bool { return atEntry }

// Drop clears the ambient set and empties the bounding set on every thread,
// locks the securebits and sets no_new_privs, unless start-up did: then it
// returns at once. It needs CAP_SETPCAP, and leaves the effective,
// permitted and inheritable sets as they are.
func Drop() error {
	if early.done {
		return nil
	}
	if early.err != nil {
		// Tried and failed at start-up: say why, then try again.
		if err := drop(); err != nil {
			return fmt.Errorf("%w (at start-up: %v)", err, early.err)
		}
		return nil
	}
	return drop()
}

// drop does Drop's work. Capabilities, securebits and no_new_privs belong
// to a thread, not the process, so every step runs on all of the Go
// runtime's threads (libcap's psx, kept by the libcap maintainers: Go's own
// syscall.AllThreadsSyscall where cgo is off, libpsx where it is on, as in a
// plain `go run ./cmd/gateway`). A step that fails on the calling thread
// runs on no other; one that succeeds there succeeds on all (the runtime
// aborts otherwise).
func drop() error {
	if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; ; c++ {
		// PR_CAPBSET_READ fails with EINVAL past the kernel's last
		// capability, which saves depending on /proc; a capability
		// already gone (on every thread, see above) costs no round trip.
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break
		}
		if err == nil && in == 0 {
			continue
		}
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c)); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := allThreadsPrctl(unix.PR_SET_SECUREBITS, lockedSecurebits); err != nil {
		return fmt.Errorf("lock securebits: %w", err)
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
