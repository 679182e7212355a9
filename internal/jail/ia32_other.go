//go:build linux && !amd64

package jail

// unshareIA32: only x86_64 has the ia32 ABI; nothing to refuse.
func unshareIA32(uintptr) (supported bool, err error) { return false, nil }
