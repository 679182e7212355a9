package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// File writes never lose data: new content goes to a temporary file in the
// target's directory, is fsynced and renamed over the target, so a reader
// or a crash sees the old or the new content, never a mix, and a failure
// (a full disk: 507) leaves the old content byte-identical and no
// temporary file behind.
//
// Read-modify-write edits (file/replace, the editor's str_replace, insert
// and undo_edit) run under a per-path lock, so concurrent API edits of one
// file apply one after the other, each to the content the previous one
// left. Right before the rename the target is stat-ed again: if a command
// (or anything outside the API) changed it since it was read — another
// inode, size or mtime — the edit is dropped with 409 "conflict" instead
// of silently overwriting that change.

// newFileMode is the mode of files the API creates, before the umask.
const newFileMode = 0o644

// tmpInfix marks temporary files: ".{name}.sandgate-tmp-{hex}".
const tmpInfix = ".sandgate-tmp-"

// createTemp creates an empty temporary file beside target with
// newFileMode (subject to the umask).
func createTemp(target string) (*os.File, error) {
	dir, name := filepath.Split(target)
	if len(name) > 200 {
		name = name[:200] // keep the temp name under NAME_MAX
	}
	for {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		f, err := os.OpenFile(filepath.Join(dir, "."+name+tmpInfix+hex.EncodeToString(rnd[:])),
			os.O_WRONLY|os.O_CREATE|os.O_EXCL, newFileMode)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// writeAtomic replaces target with the content src streams, keeping an
// existing target's mode. check, when set, runs right before the rename;
// its error aborts the write. The temporary file never outlives the call.
func writeAtomic(target string, src io.Reader, check func() error) (n int64, err error) {
	target = followLink(target)
	f, err := createTemp(target)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if n, err = io.Copy(f, src); err != nil {
		return n, err
	}
	if fi, serr := os.Stat(target); serr == nil {
		if err = f.Chmod(fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)); err != nil {
			return n, err
		}
	}
	if err = f.Sync(); err != nil {
		return n, err
	}
	if err = f.Close(); err != nil {
		return n, err
	}
	if check != nil {
		if err = check(); err != nil {
			return n, err
		}
	}
	return n, os.Rename(f.Name(), target)
}

// createAtomic creates target with data, fully written or not at all; it
// never replaces an existing file (fs.ErrExist).
func createAtomic(target string, data []byte) error {
	f, err := createTemp(target)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	err = os.Link(f.Name(), target)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		// no hard links on this filesystem: rename, refusing a file
		// that appeared meanwhile (a race only with commands)
		if _, lerr := os.Lstat(target); !errors.Is(lerr, fs.ErrNotExist) {
			return fs.ErrExist
		}
		return os.Rename(f.Name(), target)
	}
	return err
}

// followLink resolves an existing target's symlinks, so a rename replaces
// the file a link points to, not the link (as writing in place did).
// hostPath has checked the resolved path stays inside a writable mapping.
func followLink(target string) string {
	if real, err := filepath.EvalSymlinks(target); err == nil {
		return real
	}
	return target
}

// appendSafe appends data to target (created when absent). A failed append
// (a full disk) truncates the file back to its old size, so the old bytes
// stay byte-identical without copying a possibly large file.
func appendSafe(target string, data []byte) error {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_APPEND, newFileMode)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Truncate(fi.Size())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// errConflict is the 409 of an edit whose file changed under it.
func errConflict(virt string) error {
	return &apiError{status: http.StatusConflict, code: "conflict",
		msg: fmt.Sprintf("%s changed while it was being edited; read it again and retry", virt)}
}

// pathLocks serializes read-modify-write edits per host path. gen counts
// the API edits of a path, so an edit that waited can tell that the file
// moved on while it queued.
type pathLocks struct {
	mu    sync.Mutex
	locks map[string]*pathLock
}

type pathLock struct {
	mu   sync.Mutex
	refs int // guarded by pathLocks.mu
	gen  atomic.Uint64
}

// edits is the server process's per-path edit lock table.
var edits = pathLocks{locks: map[string]*pathLock{}}

// lock takes path's lock; it returns the generation seen on arrival (before
// waiting) and the unlock func.
func (p *pathLocks) lock(path string) (l *pathLock, arrival uint64, unlock func()) {
	p.mu.Lock()
	l = p.locks[path]
	if l == nil {
		l = &pathLock{}
		p.locks[path] = l
	}
	l.refs++
	arrival = l.gen.Load()
	p.mu.Unlock()
	l.mu.Lock()
	return l, arrival, func() {
		l.mu.Unlock()
		p.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(p.locks, path)
		}
		p.mu.Unlock()
	}
}

// sameFile reports whether target still is what before described.
func sameFile(target string, before os.FileInfo) bool {
	now, err := os.Stat(target)
	return err == nil && os.SameFile(before, now) && now.Size() == before.Size() && now.ModTime().Equal(before.ModTime())
}

// editFile is a read-modify-write of the existing regular file at p under
// its path lock: edit maps the content to the new one. An edit that fails
// validation (a 422: old_str not found) after another API edit of the file
// landed while it waited is a 409: the caller's view of the file is stale.
func (s *Server) editFile(field, p string, edit func(old []byte) ([]byte, error)) (virt string, old, out []byte, err error) {
	host, virt, err := s.hostPath(field, p, true)
	if err != nil {
		return "", nil, nil, err
	}
	host = followLink(host)
	l, arrival, unlock := edits.lock(host)
	defer unlock()
	fi, err := s.regularFile(field, host, virt)
	if err != nil {
		return "", nil, nil, err
	}
	if fi.Size() > maxFileContent {
		return "", nil, nil, statusErr(http.StatusRequestEntityTooLarge, "%s is larger than %d bytes; edit it with a command", virt, maxFileContent)
	}
	if old, err = os.ReadFile(host); err != nil {
		return "", nil, nil, s.fsError(err, virt)
	}
	if out, err = edit(old); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusUnprocessableEntity && l.gen.Load() != arrival {
			return "", nil, nil, errConflict(virt)
		}
		return "", nil, nil, err
	}
	changed := errConflict(virt)
	_, err = writeAtomic(host, bytes.NewReader(out), func() error {
		if !sameFile(host, fi) {
			return changed
		}
		return nil
	})
	switch {
	case errors.Is(err, changed):
		return "", nil, nil, err
	case err != nil:
		return "", nil, nil, s.fsError(err, virt)
	}
	l.gen.Add(1)
	return virt, old, out, nil
}
