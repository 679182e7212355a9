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
// modules, kexec, BPF, keyrings, perf, userfaultfd, io_uring, swap, reboot,
// the clocks, accounting, quotas, the kernel log, file handles (they bypass
// path checks), raw port I/O, NUMA policy, fanotify, the host and domain
// name, LSM attributes, and the obsolete calls. Most need a capability the
// sandbox no longer has; the filter holds should one leak, and refuses the
// rest (unshare, keyctl, io_uring, ptrace of its own children, userfaultfd)
// which need none. chroot is refused as well: no sandboxed program needs
// it, and with a leaked CAP_SYS_CHROOT it is a classic step out of a root.
//
// The list holds at least every call Docker's default profile refuses on
// x86_64 (the tests check it against that list, written down from
// moby/profiles). It is a blocklist, not Docker's allowlist, because the
// sandbox runs whatever the host's userland does, and a call an allowlist
// forgot fails those programs in ways hard to trace; what an allowlist buys
// is kept otherwise: every other ABI, the x32 calls and every call newer
// than this table are refused before the list is read (see guard).
var DeniedSyscalls = []string{
	"mount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "open_tree_attr", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	"unshare", "setns",
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"swapon", "swapoff", "reboot", "acct", "vhangup",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"open_by_handle_at", "name_to_handle_at", "fanotify_init",
	"quotactl", "quotactl_fd", "syslog", "lookup_dcookie",
	"get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "mbind", "migrate_pages", "move_pages",
	"sethostname", "setdomainname",
	"lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules",
	"_sysctl", "sysfs", "ustat", "uselib", "nfsservctl", "create_module", "get_kernel_syms", "query_module",
	"afs_syscall", "getpmsg", "putpmsg", "security", "tuxcall", "vserver",
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

// x32Bit marks a syscall number of the x32 ABI, which runs under
// AUDIT_ARCH_X86_64 with numbers of its own.
const x32Bit = 0x4000_0000

// errnoEPERM is the refusal of a syscall.
const errnoEPERM = seccomp.ActionErrno | seccomp.Action(unix.EPERM)

// guard is the filter's first part, before the policy: a syscall of any
// other ABI than this machine's own (ia32 through int $0x80 on x86_64, arm32
// on arm64: each has its own numbers, which the policy does not know) is
// refused, as is one with the x32 bit; a number above the highest the
// policy's table knows gets ENOSYS, as if this kernel were older, so a
// call a newer kernel adds stays off until it has been looked at (runc does
// the same). go-seccomp-bpf alone sends another ABI to the default action,
// which is Allow.
func guard(info *arch.Info) []bpf.Instruction {
	highest := 0
	for nr := range info.SyscallNumbers {
		highest = max(highest, nr)
	}
	g := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(errnoEPERM)},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
	}
	if info.ID == arch.X86_64.ID {
		g = append(g,
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: uint32(errnoEPERM)})
	}
	return append(g,
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: uint32(highest), SkipFalse: 1},
		bpf.RetConstant{Val: uint32(errnoENOSYS)})
}

var program = sync.OnceValues(func() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	policy, err := Policy()
	if err != nil {
		return nil, err
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	// The guard's jumps stay within it, so the policy's own (relative)
	// jumps are unchanged behind it.
	raw, err := bpf.Assemble(append(guard(info), insts...))
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
