//go:build !linux

package checkpoint

import "golang.org/x/sys/unix"

// clone: FICLONE is Linux's; elsewhere every copy is a plain one.
func clone(dst, src int) error { return unix.ENOTSUP }

// mkfifoAt: without mkfifoat a FIFO is skipped (counted in api.Checkpoint.Skipped).
func mkfifoAt(dir int, name string) error { return unix.ENOTSUP }

// copyFileRange is Linux's; elsewhere the caller falls back to pread/pwrite.
func copyFileRange(int, *int64, int, *int64, int) (int, error) { return 0, unix.ENOSYS }
