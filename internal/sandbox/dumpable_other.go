//go:build !linux

package sandbox

// undumpable is a no-op off Linux, which has no PR_SET_DUMPABLE; there the
// sandbox's isolation is the container or VM around the server.
func undumpable() error { return nil }
