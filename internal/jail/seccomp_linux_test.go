package jail

import (
	"slices"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// dockerRefused are the syscalls Docker's default seccomp profile refuses
// on x86_64 to a container with Docker's default capabilities: every call
// of go-seccomp-bpf's x86_64 table that the profile allows neither outright,
// nor for one of the default capabilities (chroot, for CAP_SYS_CHROOT), nor
// for some arguments (clone, personality, socket: the filter has argument
// rules for the first two; socket is left open). Written down from
// moby/profiles seccomp/default.json at cd3bed8061c7 (2026-06-30).
var dockerRefused = []string{
	"_sysctl", "acct", "add_key", "afs_syscall", "bpf", "clock_settime", "clone3", "create_module",
	"delete_module", "fanotify_init", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
	"get_kernel_syms", "get_mempolicy", "getpmsg", "init_module", "io_uring_enter", "io_uring_register",
	"io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
	"lsm_get_self_attr", "lsm_list_modules", "lsm_set_self_attr", "mbind", "migrate_pages", "mount",
	"mount_setattr", "move_mount", "move_pages", "nfsservctl", "open_by_handle_at", "open_tree",
	"open_tree_attr", "perf_event_open", "pidfd_getfd", "pivot_root", "process_madvise", "putpmsg",
	"query_module", "quotactl", "quotactl_fd", "reboot", "request_key", "security", "set_mempolicy",
	"set_mempolicy_home_node", "setdomainname", "sethostname", "setns", "settimeofday", "swapoff", "swapon",
	"sysfs", "syslog", "tuxcall", "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vhangup", "vserver",
}

// The sandbox refuses at least what Docker refuses.
func TestDeniedCoversDocker(t *testing.T) {
	t.Parallel()
	for _, name := range dockerRefused {
		if name == "clone3" { // ENOSYS, in a group of its own
			continue
		}
		if !slices.Contains(deniedSyscalls, name) {
			t.Errorf("%s: Docker refuses it, the sandbox's filter does not", name)
		}
	}
}

// A misspelt or missing name would be dropped silently by seccompPolicy
// (it skips what an architecture lacks): on x86_64 every name exists; arm64
// lacks the x86 port I/O calls and the calls it never had.
func TestDeniedSyscallsExist(t *testing.T) {
	t.Parallel()
	arm64Lacks := []string{"iopl", "ioperm", "_sysctl", "sysfs", "ustat", "uselib", "create_module",
		"get_kernel_syms", "query_module", "afs_syscall", "getpmsg", "putpmsg", "security", "tuxcall", "vserver"}
	for _, tt := range []struct {
		arch    *arch.Info
		missing []string
	}{
		{arch.X86_64, nil},
		{arch.AARCH64, arm64Lacks},
	} {
		for _, name := range append(slices.Clone(deniedSyscalls), "clone", "clone3", "personality") {
			_, ok := tt.arch.SyscallNames[name]
			if want := !slices.Contains(tt.missing, name); ok != want {
				t.Errorf("%s: %s present = %v, want %v", tt.arch.Name, name, ok, want)
			}
		}
	}
}

func TestSeccompPolicyAssembles(t *testing.T) {
	t.Parallel()
	policy, err := seccompPolicy()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Assemble(); err != nil {
		t.Fatal(err)
	}
}
