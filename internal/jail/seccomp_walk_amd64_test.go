//go:build linux

package jail

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func init() {
	testScenarios["walk-locked"] = func() int {
		return initScenario(func(rw string) (Report, error) {
			return lockDown(Limits{}.WithDefaults(), false, []string{rw}, testSeccomp())
		}, "walk")
	}
	testScenarios["walk-control"] = func() int { return initScenario(nil, "walk") }
	testScenarios["walk"] = runWalk
}

// walked are the calls the walk tries: Docker's refusals and the filter's.
func walked() []string {
	names := slices.Concat(dockerRefused, deniedSyscalls)
	slices.Sort(names)
	return slices.Compact(names)
}

// allOnes is every argument of a walked call: an invalid fd, pointer,
// flag set and length at once, so a call the filter lets through fails
// in the kernel with EBADF, EFAULT or EINVAL (or EPERM where it needs a
// capability first), and changes nothing either way.
const allOnes = ^uintptr(0)

// runWalk makes each walked call on the native ABI and on the ia32 one (int
// $0x80, in a child each), then the attacks that work unprivileged: the
// ia32 unshare of the issue, io_uring, reading its own memory through
// process_vm_readv; also an x32 call and one newer than the filter's table.
func runWalk() int {
	for _, name := range walked() {
		nr := arch.X86_64.SyscallNames[name]
		emit("native "+name, errnoOf(unix.Syscall6(uintptr(nr), allOnes, allOnes, allOnes, allOnes, allOnes, allOnes)), "")
		if nr, ok := arch.I386.SyscallNames[name]; ok {
			emit("ia32 "+name, ia32Result(IA32Syscall(uintptr(nr), allOnes, allOnes, allOnes, allOnes, allOnes)), "")
		}
	}
	emit("ia32 unshare newuser", ia32Result(unshareIA32(unix.CLONE_NEWUSER)), "")
	emit("ia32 getpid", ia32Result(IA32Syscall(uintptr(arch.I386.SyscallNames["getpid"]), 0, 0, 0, 0, 0)), "")
	emit("io_uring_setup 8", func() error {
		var params [120]byte // struct io_uring_params
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params)), 0)
		if e != 0 {
			return e
		}
		return unix.Close(int(fd))
	}(), "")
	emit("process_vm_readv self", func() error {
		src, dst := []byte("secret"), make([]byte, 6)
		_, err := unix.ProcessVMReadv(unix.Getpid(), []unix.Iovec{{Base: &dst[0], Len: 6}},
			[]unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 6}}, 0)
		return err
	}(), "")
	emit("x32 getpid", errnoOf(unix.Syscall(x32Bit|39, 0, 0, 0)), "")
	emit("newer than the table", errnoOf(unix.Syscall6(uintptr(highestKnown()+1), allOnes, allOnes, allOnes, allOnes, allOnes, allOnes)), "")
	return 0
}

// x32Bit marks an x32 syscall number.
const x32Bit = 0x4000_0000

func highestKnown() int {
	return slices.Max(slices.Collect(func(yield func(int) bool) {
		for nr := range arch.X86_64.SyscallNumbers {
			if !yield(nr) {
				return
			}
		}
	}))
}

// ia32Result is an ia32 call's outcome as a result; a kernel without ia32
// emulation is an error of its own, so the test sees it.
func ia32Result(supported bool, err error) error {
	if !supported {
		return errors.New(noIA32)
	}
	return err
}

// TestSyscallWalk proves, on this kernel, that each call Docker's default
// profile refuses (and each the filter denies) is refused in the jail on
// the native ABI and on the ia32 one, with EPERM (clone3: ENOSYS, so libc
// falls back to clone). The control sandbox, the same namespaces and
// capabilities without the lock-down, makes the same calls: where it gets
// something else than EPERM, the jail's EPERM is the filter's; where it
// gets EPERM too (the call needs a capability of the host's namespace),
// TestFilterEveryABI shows the filter refuses it all the same.
func TestSyscallWalk(t *testing.T) {
	requireJail(t)
	capOnly := []string{ // EPERM in the control sandbox too: a capability of the host's namespace
		"acct", "bpf", "delete_module", "finit_module", "init_module", "kexec_file_load", "kexec_load",
		"reboot", "swapoff", "swapon", "vhangup", "open_by_handle_at", "fanotify_init", "syslog",
	}
	locked, control := map[string]expect{}, map[string]expect{}
	for _, name := range walked() {
		locked["native "+name] = "EPERM"
		control["native "+name] = "!EPERM"
		if _, ok := arch.I386.SyscallNames[name]; ok {
			locked["ia32 "+name] = "EPERM"
			control["ia32 "+name] = "!EPERM"
		}
		if slices.Contains(capOnly, name) {
			delete(control, "native "+name)
			delete(control, "ia32 "+name)
		}
	}
	locked["native clone3"] = "ENOSYS"
	for name, w := range map[string][2]expect{
		"init lockdown":         {"ok", ""},
		"probes ran":            {"ok", "ok"},
		"ia32 unshare newuser":  {"EPERM", "ok"},
		"ia32 getpid":           {"EPERM", "ok"},
		"io_uring_setup 8":      {"EPERM", "ok"},
		"process_vm_readv self": {"EPERM", "ok"},
		"x32 getpid":            {"EPERM", ""},
		"newer than the table":  {"ENOSYS", ""},
	} {
		locked[name] = w[0]
		if w[1] != "" {
			control[name] = w[1]
		}
	}
	// A kernel built or booted without ia32 emulation faults every int
	// $0x80, here as in both sandboxes: nothing is left to refuse, and no
	// ia32 call may get through (TestFilterEveryABI still checks that the
	// filter refuses them all).
	if supported, _ := IA32Syscall(uintptr(arch.I386.SyscallNames["getpid"]), 0, 0, 0, 0, 0); !supported {
		t.Logf("this kernel runs no ia32 code: the walk's ia32 calls must fault in both sandboxes")
		for _, want := range []map[string]expect{locked, control} {
			for name := range want {
				if strings.HasPrefix(name, "ia32 ") {
					want[name] = noIA32
				}
			}
		}
	}
	for mode, want := range map[string]map[string]expect{"walk-locked": locked, "walk-control": control} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			checkResults(t, runJailed(t, mode), want)
		})
	}
}

// TestFilterEveryABI runs the compiled filter in a BPF interpreter for
// every walked call on each ABI: the native one (EPERM; clone3 ENOSYS),
// ia32 and x32 (EPERM, whatever the call), and calls the sandbox needs
// (allowed). It covers what the walk cannot tell apart on this kernel: a
// call that needs a capability fails with EPERM with or without a filter.
func TestFilterEveryABI(t *testing.T) {
	t.Parallel()
	vm := filterVM(t)
	eperm, enosys := uint32(seccomp.ActionErrno)|uint32(unix.EPERM), uint32(seccomp.ActionErrno)|uint32(unix.ENOSYS)
	allow := uint32(seccomp.ActionAllow)
	check := func(what string, auditArch, nr uint32, want uint32) {
		t.Helper()
		got, err := vm.Run(seccompData(auditArch, nr))
		if err != nil {
			t.Fatal(err)
		}
		if uint32(got) != want {
			t.Errorf("%s: action %#x, want %#x", what, got, want)
		}
	}
	x86, i386 := uint32(arch.X86_64.ID), uint32(arch.I386.ID)
	for _, name := range walked() {
		want := eperm
		if name == "clone3" {
			want = enosys
		}
		check("native "+name, x86, uint32(arch.X86_64.SyscallNames[name]), want)
		if nr, ok := arch.X32.SyscallNames[name]; ok {
			check("x32 "+name, x86, uint32(nr)|x32Bit, eperm)
		}
	}
	for nr := range arch.I386.SyscallNumbers {
		check("ia32 "+arch.I386.SyscallNumbers[nr], i386, uint32(nr), eperm)
	}
	for _, name := range []string{"read", "write", "openat", "mmap", "execve", "wait4", "getpid", "socket"} {
		check("native "+name, x86, uint32(arch.X86_64.SyscallNames[name]), allow)
	}
	check("newer than the table", x86, uint32(highestKnown()+1), enosys)
}

// filterVM loads the program the gateway hands to a sandbox.
func filterVM(t *testing.T) *bpf.VM {
	t.Helper()
	vm, err := filterInterpreter(parseFilter(testSeccomp()))
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// seccompData is struct seccomp_data of call nr on the ABI auditArch.
func seccompData(auditArch, nr uint32) []byte { return seccompInput(auditArch, nr, 0) }
