//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package sandbox

import "syscall"

// kernelRelease is the running kernel's release (uname -r).
func kernelRelease() string {
	r, err := syscall.Sysctl("kern.osrelease")
	if err != nil {
		return ""
	}
	return r
}
