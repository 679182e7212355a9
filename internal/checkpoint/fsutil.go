package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Every path below a root is reached one component at a time through
// directory descriptors opened with O_NOFOLLOW, so a symlink the sandbox
// plants (or swaps in) is never followed, and nothing is opened by a path
// the sandbox could redirect.
const (
	dirFlags    = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	readFlags   = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	createFlags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
)

// stat is the part of a stat(2) answer the engine uses, the same on every
// unix (unix.Stat_t's field types differ between platforms).
type stat struct {
	mode       uint32 // type and permission bits
	uid, gid   uint32
	size       int64
	blocks     int64 // 512-byte blocks allocated: what the file costs on disk
	nlink      uint64
	atim, mtim unix.Timespec
	dev, ino   uint64
}

func fromSys(st *unix.Stat_t) stat {
	return stat{
		mode: uint32(st.Mode), uid: st.Uid, gid: st.Gid, size: st.Size, blocks: int64(st.Blocks),
		nlink: uint64(st.Nlink), atim: st.Atim, mtim: st.Mtim, dev: uint64(st.Dev), ino: st.Ino,
	}
}

func (s stat) typ() uint32  { return s.mode & unix.S_IFMT }
func (s stat) perm() uint32 { return s.mode & 0o7777 }
func (s stat) isDir() bool  { return s.typ() == unix.S_IFDIR }

// lstatAt stats name in dir without following a symlink.
func lstatAt(dir int, name string) (stat, error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return stat{}, err
	}
	return fromSys(&st), nil
}

func fstat(fd int) (stat, error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return stat{}, err
	}
	return fromSys(&st), nil
}

// openDirAt opens name in dir as a directory, refusing a symlink.
func openDirAt(dir int, name string) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dir, name, dirFlags, 0)
		return err
	})
	return fd, err
}

// openRoot opens path as a directory; its last component must not be a
// symlink (the components before it are the gateway's own paths).
func openRoot(path string) (int, error) {
	fd, err := openDirAt(unix.AT_FDCWD, path)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, fmt.Errorf("%w: %s", ErrNotDir, path)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// openRel opens the directory rel ("a/b", "" for root itself) below root,
// one component at a time.
func openRel(root int, rel string) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil || rel == "" {
		return fd, err
	}
	for _, name := range strings.Split(rel, "/") {
		next, err := openDirAt(fd, name)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// readNames lists a directory's entries, "." and ".." left out.
func readNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	buf := make([]byte, 32<<10)
	var names []string
	for {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.ReadDirent(fd, buf)
			return err
		})
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// readlinkAt reads the target of the symlink name in dir (never the file
// it points at).
func readlinkAt(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// setTimes gives name in dir (not followed) the access and modification
// times of st.
func setTimes(dir int, name string, st stat) error {
	return unix.UtimesNanoAt(dir, name, []unix.Timespec{st.atim, st.mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// removeAt removes name in dir and everything below it without following
// symlinks. Directories whose mode would stop their owner from emptying
// them (a copied 0555) are opened up first, so a non-root gateway can
// remove what it copied. It only runs on trees the sandbox cannot reach
// (temp dirs, trash, checkpoints), which are not changed under it.
func removeAt(ctx context.Context, dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	st, serr := lstatAt(dir, name)
	if serr != nil || !st.isDir() {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if st.perm()&0o700 != 0o700 {
		if err := unix.Fchmodat(dir, name, st.perm()|0o700, 0); err != nil {
			return fmt.Errorf("open up %s: %w", name, err)
		}
	}
	fd, err := openDirAt(dir, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	names, err := readNames(fd)
	for _, n := range names {
		if err != nil {
			break
		}
		err = removeAt(ctx, fd, n)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove dir %s: %w", name, err)
	}
	return nil
}

// removePath removes path (a temp dir or checkpoint of ours) and its tree.
func removePath(ctx context.Context, path string) error {
	parent, err := openRoot(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	return removeAt(ctx, parent, filepath.Base(path))
}

// ignoringEINTR retries a call interrupted by a signal (the Go runtime's
// preemption signals interrupt slow filesystem calls).
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
