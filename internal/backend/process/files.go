//go:build unix

package process

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandgate/sandgate/internal/proctree"
)

// The state, lock and /proc files of the create and claim paths are opened
// with one open(2). os.OpenFile and os.ReadFile first offer every file to
// the netpoller (fcntl, epoll_ctl, fcntl back: four calls that fail or undo
// for a regular file); on a paravirtualised VM, where a syscall costs tens
// of microseconds, those were a quarter of a prewarmed claim's own time.
// os.NewFile costs one fcntl and leaves the file blocking, as a regular
// file is anyway.

// openFile opens path like os.OpenFile, without the netpoller's attempt.
func openFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readFile reads a small file like os.ReadFile, without the netpoller's
// attempt or the fstat sizing its buffer.
func readFile(path string) ([]byte, error) { return proctree.ReadFile(path) }

// createTemp creates a new file beside path's final name, like
// os.CreateTemp(dir, prefix+"*"), without the netpoller's attempt.
func createTemp(dir, prefix string) (*os.File, error) {
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		f, err := openFile(filepath.Join(dir, prefix+hex.EncodeToString(b[:])), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}
