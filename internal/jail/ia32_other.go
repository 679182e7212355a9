//go:build linux && !amd64

package jail

import "golang.org/x/sys/unix"

// unshareIA32: only x86_64 has the ia32 ABI; nothing to refuse.
func unshareIA32(uintptr) (supported bool, err error) { return false, nil }

// ia32UnshareRefused: only x86_64 has the ia32 ABI; nothing to refuse.
func ia32UnshareRefused([]unix.SockFilter) (bool, error) { return true, nil }
