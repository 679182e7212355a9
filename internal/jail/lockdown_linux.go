//go:build linux

package jail

import "github.com/sandgate/sandgate/internal/jail/earlydrop"

// lockDown is the last thing the sandbox's init does before it starts the
// sandbox server: it applies l (defaults already applied), restricts writes
// to writable (Landlock), drops every capability and loads the seccomp
// filter (seccompProgram, see installSeccomp), on all threads, so the
// server and all it starts inherit it all.
// memoryByRlimit bounds memory with RLIMIT_AS (see addressSpaceLimit), for
// when no cgroup does.
//
// The order matters. Rlimits come first: they only lower limits. Landlock
// comes next; it sets no_new_privs itself, which it needs without
// CAP_SYS_ADMIN. Capabilities go after, as dropping the bounding set and
// locking securebits need CAP_SETPCAP, which capset then gives up (the
// sandbox init has done those two at start-up: package earlydrop). The
// seccomp filter comes last: it needs no_new_privs (set by then), and so
// refuses nothing the earlier steps still had to do.
//
// An error leaves the process partly locked down: the caller must not start
// the server then. The Report says what is in place, also on error.
func lockDown(l Limits, memoryByRlimit bool, writable []string, seccompProgram []byte) (Report, error) {
	var r Report
	if err := applyRlimits(l, memoryByRlimit); err != nil {
		return r, err
	}
	r.Rlimits = true
	if memoryByRlimit {
		r.AddressSpace = addressSpaceLimit(l)
	}
	if err := restrictFilesystem(writable); err != nil {
		return r, err
	}
	r.LandlockABI = landlockABI()
	if err := dropPrivileges(); err != nil {
		return r, err
	}
	r.CapsDropped, r.AtEntry = true, earlydrop.AtEntry()
	if err := installSeccomp(seccompProgram); err != nil {
		return r, err
	}
	r.Seccomp = true
	return r, nil
}
