//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package sandbox

// kernelRelease is unknown here: os_version is reported empty.
func kernelRelease() string { return "" }
