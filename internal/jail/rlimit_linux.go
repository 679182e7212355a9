//go:build linux

package jail

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// rlimit is one resource limit applyRlimits sets.
type rlimit struct {
	name     string
	resource int
	value    int64
}

// applyRlimits bounds the init process; rlimits are per process and survive
// fork and execve, so every process of the sandbox inherits them. Soft and
// hard limits are set alike so a sandboxed program cannot raise its own.
// A negative field leaves that limit as inherited; RLIMIT_AS is set only when
// memoryByRlimit, i.e. when no cgroup bounds the sandbox's memory.
func applyRlimits(l Limits, memoryByRlimit bool) error {
	limits := []rlimit{
		{"nproc", unix.RLIMIT_NPROC, l.sandboxProcesses()},
		{"nofile", unix.RLIMIT_NOFILE, int64(l.OpenFiles)},
		{"fsize", unix.RLIMIT_FSIZE, l.FileSize},
		{"core", unix.RLIMIT_CORE, 0},
	}
	if memoryByRlimit {
		limits = append(limits, rlimit{"as", unix.RLIMIT_AS, addressSpaceLimit(l)})
	}
	for _, r := range limits {
		if r.value < 0 {
			continue
		}
		if err := lowerRlimit(r.resource, uint64(r.value)); err != nil {
			return fmt.Errorf("rlimit %s=%d: %w", r.name, r.value, err)
		}
	}
	return nil
}

// minAddressSpace is the least RLIMIT_AS the sandbox gets. The Go runtime
// of its init and server reserves some 700 MiB of address space when it
// starts (the page allocator's summaries), and with limits around 1 GiB it
// fails erratically to reserve its heap arenas. Measured with Go 1.26 on
// amd64: 1.4 GiB and more start every time.
const minAddressSpace = 2 << 30

// addressSpaceLimit is the RLIMIT_AS that bounds memory for l: l.Memory,
// but no less than minAddressSpace; -1 for none. Address space is not
// memory: programs that reserve much (Go, Java) reach it long before their
// memory does, hence cgroups first.
func addressSpaceLimit(l Limits) int64 {
	if l.Memory < 0 {
		return -1
	}
	return max(l.Memory, minAddressSpace)
}

// lowerRlimit sets soft and hard limit to v, or to the current hard limit
// when that is lower: raising it would need CAP_SYS_RESOURCE in the initial
// user namespace. syscall.Setrlimit (not x/sys/unix) also tells os/exec not
// to restore, in children, the soft RLIMIT_NOFILE Go had at start-up.
func lowerRlimit(resource int, v uint64) error {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(resource, &cur); err != nil {
		return err
	}
	v = min(v, cur.Max)
	return syscall.Setrlimit(resource, &syscall.Rlimit{Cur: v, Max: v})
}
