package jail

import (
	"fmt"
	"strings"
)

// Report says which protections lockDown put in place, for the sandbox's
// start-up log line.
type Report struct {
	// LandlockABI is the kernel's Landlock ABI version; 0 means no
	// Landlock, so writes are bounded by file permissions only.
	LandlockABI int
	// Rlimits: NPROC, NOFILE, FSIZE and CORE set.
	Rlimits bool
	// AddressSpace is the RLIMIT_AS that bounds memory when no cgroup
	// does, 0 when not set.
	AddressSpace int64
	// CapsDropped: no capability left, none to be gained.
	CapsDropped bool
	// AtEntry: the bounding set, ambient set, securebits and no_new_privs
	// were done before the Go runtime started (earlydrop.AtEntry).
	AtEntry bool
	// Seccomp: the syscall filter is loaded.
	Seccomp bool
}

func (r Report) String() string {
	var parts []string
	if r.LandlockABI > 0 {
		parts = append(parts, fmt.Sprintf("landlock ABI %d", r.LandlockABI))
	} else {
		parts = append(parts, "no landlock")
	}
	on := func(ok bool, yes, no string) {
		if ok {
			parts = append(parts, yes)
		} else {
			parts = append(parts, no)
		}
	}
	on(r.Rlimits, "rlimits set", "no rlimits")
	if r.AddressSpace > 0 {
		parts = append(parts, fmt.Sprintf("RLIMIT_AS %d MiB", r.AddressSpace>>20))
	}
	on(r.CapsDropped, "capabilities dropped", "capabilities kept")
	if r.AtEntry {
		parts = append(parts, "bounding set emptied at entry")
	}
	on(r.Seccomp, "seccomp on", "no seccomp")
	return strings.Join(parts, ", ")
}
