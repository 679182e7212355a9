package jail

import (
	"slices"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// A misspelt or missing name would be dropped silently by seccompPolicy
// (it skips what an architecture lacks): only the x86 port I/O calls may be
// missing, and only on arm64.
func TestDeniedSyscallsExist(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		arch    *arch.Info
		missing []string
	}{
		{arch.X86_64, nil},
		{arch.AARCH64, []string{"iopl", "ioperm"}},
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
