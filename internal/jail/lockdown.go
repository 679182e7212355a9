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
	// Rlimits: NPROC, NOFILE, FSIZE and CORE set; MemoryByRlimit: and
	// RLIMIT_AS, as no cgroup bounds memory.
	Rlimits, MemoryByRlimit bool
	// CapsDropped: no capability left, none to be gained.
	CapsDropped bool
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
	on(r.MemoryByRlimit, "memory by RLIMIT_AS", "memory by cgroup")
	on(r.CapsDropped, "capabilities dropped", "capabilities kept")
	on(r.Seccomp, "seccomp on", "no seccomp")
	return strings.Join(parts, ", ")
}
