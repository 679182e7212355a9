//go:build unix

package proctree

import (
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ReadFile reads a small file (a /proc file, a state file) like
// os.ReadFile, in one open(2): os.ReadFile first offers every file to the
// netpoller (fcntl, epoll_ctl, fcntl back: calls that fail or undo for a
// regular file) and sizes its buffer by fstat; on a paravirtualised VM,
// where a syscall costs tens of microseconds, those were a quarter of the
// process backend's prewarmed claim. os.NewFile costs one fcntl and leaves
// the file blocking, as a regular file is anyway.
func ReadFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return io.ReadAll(f)
}
