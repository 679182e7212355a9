//go:build linux

package seccompfilter

import (
	"encoding/binary"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// DeniedSyscalls fail with EPERM in the sandbox: mounting and the new mount
// API, namespaces, debugging and reading other processes' memory, kernel
// modules, kexec, BPF, keyrings, perf, userfaultfd, swap, reboot, the
// clocks, accounting, quotas, the kernel log, file handles (they bypass
// path checks), raw port I/O. Most need a capability the sandbox no longer
// has; the filter holds should one leak, and refuses the rest (unshare,
// keyctl, ptrace of its own children, userfaultfd) which need none.
// chroot is refused as well: no sandboxed program needs it, and with a
// leaked CAP_SYS_CHROOT it is a classic step out of a root.
var DeniedSyscalls = []string{
	"mount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "open_tree_attr", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	"unshare", "setns",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
	"swapon", "swapoff", "reboot", "acct",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"open_by_handle_at", "name_to_handle_at",
	"quotactl", "quotactl_fd", "syslog", "lookup_dcookie",
	"iopl", "ioperm", // x86 only
}

// namespaceCloneFlags are the CLONE_NEW* bits clone(2) may not carry.
// CLONE_NEWTIME shares its bit with the exit signal in clone(2) (where the
// kernel rejects it anyway) and is listed for the record.
const namespaceCloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// allowedPersonalities are the personality(2) arguments Docker's default
// profile allows too: Linux, Linux32, their UNAME26 variants, and the query
// 0xffffffff. Others could, for one, turn off address randomisation.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// errnoENOSYS makes clone3 look absent: its flags sit in memory the filter
// cannot read, and libc and Go fall back to clone(2), whose flags it can.
const errnoENOSYS = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)

// Policy is the filter for this machine's architecture: everything is
// allowed but DeniedSyscalls (those the architecture has), clone with a
// namespace flag and personality with another persona (EPERM), and clone3
// (ENOSYS).
func Policy() (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, err
	}
	var denied []string
	for _, name := range DeniedSyscalls {
		if _, ok := info.SyscallNames[name]; ok {
			denied = append(denied, name)
		}
	}
	notAllowed := make(seccomp.ArgumentConditions, 0, len(allowedPersonalities))
	for _, p := range allowedPersonalities {
		notAllowed = append(notAllowed, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: p})
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: denied},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
				// clone's flags are its first argument on amd64 and
				// arm64 (not on s390x, which is not supported).
				{Name: "clone", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceCloneFlags},
				}},
				{Name: "personality", Conditions: notAllowed},
			}},
			{Action: errnoENOSYS, Names: []string{"clone3"}},
		},
	}, nil
}

var program = sync.OnceValues(func() ([]byte, error) {
	policy, err := Policy()
	if err != nil {
		return nil, err
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
})
