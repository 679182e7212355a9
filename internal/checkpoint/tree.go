package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxDepth bounds how deep a tree is copied: a deeper one is refused with
// ErrTooDeep (each level holds open descriptors while it is copied).
const MaxDepth = 256

const (
	// checkEvery is how many entries pass between context checks.
	checkEvery = 64
	// copyChunk is how much of a file is copied between context checks.
	copyChunk = 64 << 20
)

// copier copies one tree into another: directories, regular files,
// symlinks (as links) and FIFOs (recreated), each with its mode, times and,
// as root, owner. Sockets and devices are skipped and counted. Holes stay
// holes and the names of one multiply-linked file stay links of one copy,
// so a copy costs what its source allocates, never more (a sparse or
// hard-linked workspace must not become a disk-filling checkpoint).
type copier struct {
	ctx      context.Context
	reflink  bool // try FICLONE; cleared on the first refusal
	fellBack bool // some file was copied after a refusal
	chown    bool // root: keep uid/gid

	// linkBefore enables hard links to the previous checkpoint's copy of an
	// unchanged file (Create only): a file qualifies when its mtime (unix
	// ns) is before linkBefore, so a write in the same timestamp tick as
	// the previous snapshot cannot go unnoticed. 0 disables linking.
	linkBefore int64

	// budget bounds what the copy adds (Threads: the user's allowance);
	// added is what it has added so far, counted before each entry is made.
	budget Budget
	added  Usage

	// dstRoot is the destination tree's root and path the directory being
	// copied below it; links maps a multiply-linked source file to its
	// first copy (a path below dstRoot), which its other names link to.
	dstRoot int
	path    []string
	links   map[fileKey]string

	steps                  int
	files, linked, skipped int
	size                   int64
}

// fileKey names a file across its hard links.
type fileKey struct{ dev, ino uint64 }

func newCopier(ctx context.Context, m Method, b Budget) *copier {
	return &copier{ctx: ctx, reflink: m == MethodReflink, chown: isRoot(), budget: b, dstRoot: -1}
}

// charge counts an entry about to be made (its allocated bytes, its inode)
// against the budget, refusing the one that would pass it.
func (c *copier) charge(bytes, inodes int64) error {
	c.added.Bytes += bytes
	c.added.Inodes += inodes
	return c.budget.check(c.added)
}

// tree copies the directory src's entries into the existing, empty dst.
func (c *copier) tree(src, dst, prev int) error {
	c.dstRoot, c.path = dst, nil
	return c.dir(src, dst, prev, 1)
}

// isRoot: only root can give copies their original owners.
func isRoot() bool { return os.Geteuid() == 0 }

// method is how the file data was copied.
func (c *copier) method() Method {
	if c.reflink && !c.fellBack {
		return MethodReflink
	}
	return MethodCopy
}

func (c *copier) tick() error {
	c.steps++
	if c.steps%checkEvery == 0 {
		return c.ctx.Err()
	}
	return nil
}

// root copies the directory src's entries into the existing directory dst
// (prev: the same directory in the previous checkpoint, or -1) and then
// gives dst, which is name in dstParent, src's attributes.
func (c *copier) root(src, dstParent int, name string, prev int) error {
	st, err := fstat(src)
	if err != nil {
		return err
	}
	dst, err := openDirAt(dstParent, name)
	if err != nil {
		return err
	}
	err = c.tree(src, dst, prev)
	unix.Close(dst)
	if err != nil {
		return err
	}
	return c.attrs(dstParent, name, -1, st)
}

// dir copies the entries of src into dst.
func (c *copier) dir(src, dst, prev, depth int) error {
	if depth > MaxDepth {
		return ErrTooDeep
	}
	names, err := readNames(src)
	if err != nil {
		return fmt.Errorf("read dir: %w", err)
	}
	for _, name := range names {
		if err := c.tick(); err != nil {
			return err
		}
		if err := c.entry(src, dst, prev, name, depth); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// entry copies one entry of src into dst by its type, never following a
// symlink and never opening anything but a regular file or a directory.
func (c *copier) entry(src, dst, prev int, name string, depth int) error {
	st, err := lstatAt(src, name)
	if errors.Is(err, unix.ENOENT) {
		return nil // gone since the listing (only when the caller does not freeze)
	}
	if err != nil {
		return err
	}
	switch st.typ() {
	case unix.S_IFDIR:
		return c.subdir(src, dst, prev, name, depth)
	case unix.S_IFREG:
		return c.file(src, dst, prev, name, st)
	case unix.S_IFLNK:
		target, err := readlinkAt(src, name)
		if err != nil {
			return err
		}
		if err := c.charge(st.blocks*512, 1); err != nil {
			return err
		}
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return err
		}
		return c.attrs(dst, name, -1, st)
	case unix.S_IFIFO:
		if err := c.charge(0, 1); err != nil {
			return err
		}
		err := mkfifoAt(dst, name)
		if errors.Is(err, unix.ENOTSUP) {
			c.skipped++
			return nil
		}
		if err != nil {
			return err
		}
		return c.attrs(dst, name, -1, st)
	default: // sockets and devices: meaningless or dangerous in a copy
		c.skipped++
		return nil
	}
}

func (c *copier) subdir(src, dst, prev int, name string, depth int) error {
	sfd, err := openDirAt(src, name)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	st, err := fstat(sfd) // what was opened, if it changed since the lstat
	if err != nil {
		return err
	}
	if err := c.charge(st.blocks*512, 1); err != nil {
		return err
	}
	if err := unix.Mkdirat(dst, name, 0o700); err != nil {
		return err
	}
	dfd, err := openDirAt(dst, name)
	if err != nil {
		return err
	}
	pfd := -1
	if prev >= 0 {
		if fd, err := openDirAt(prev, name); err == nil {
			pfd = fd
			defer unix.Close(pfd)
		}
	}
	c.path = append(c.path, name)
	err = c.dir(sfd, dfd, pfd, depth+1)
	c.path = c.path[:len(c.path)-1]
	unix.Close(dfd)
	if err != nil {
		return err
	}
	return c.attrs(dst, name, -1, st)
}

func (c *copier) file(src, dst, prev int, name string, st stat) error {
	if c.linkCopied(dst, name, st) {
		return nil
	}
	if c.linkPrev(dst, prev, name, st) {
		c.remember(name, st)
		return nil
	}
	in, err := openFileAt(src, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(in)
	if st, err = fstat(in); err != nil {
		return err
	}
	if st.typ() != unix.S_IFREG { // swapped since the lstat; opened non-blocking, so no hang
		c.skipped++
		return nil
	}
	if err := unix.SetNonblock(in, false); err != nil {
		return err
	}
	if err := c.charge(st.blocks*512, 1); err != nil {
		return err
	}
	out, err := unix.Openat(dst, name, createFlags, 0o600)
	if err != nil {
		return err
	}
	err = c.fill(out, in, st.size)
	if err == nil {
		err = c.attrs(dst, name, out, st)
	}
	if cerr := unix.Close(out); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	c.files++
	c.size += st.size
	c.remember(name, st)
	return nil
}

// remember records name (just made in the current directory) as the copy
// of st's file when the file has other names still to come.
func (c *copier) remember(name string, st stat) {
	if st.nlink < 2 || c.dstRoot < 0 {
		return
	}
	if c.links == nil {
		c.links = map[fileKey]string{}
	}
	key := fileKey{st.dev, st.ino}
	if _, ok := c.links[key]; !ok {
		c.links[key] = strings.Join(append(c.path[:len(c.path):len(c.path)], name), "/")
	}
}

// linkCopied links name to the copy already made of another name of st's
// file. The path is below dstRoot, a tree of ours the sandbox cannot
// reach. A failure (EMLINK) copies instead.
func (c *copier) linkCopied(dst int, name string, st stat) bool {
	if st.nlink < 2 || c.dstRoot < 0 {
		return false
	}
	first, ok := c.links[fileKey{st.dev, st.ino}]
	if !ok || unix.Linkat(c.dstRoot, first, dst, name, 0) != nil {
		return false
	}
	c.files++
	c.size += st.size
	return true
}

func openFileAt(dir int, name string) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dir, name, readFlags, 0)
		return err
	})
	return fd, err
}

// linkPrev hard-links name to the previous checkpoint's copy when that copy
// has st's size, mtime, mode (and owner, as root) and st is not racy. Both
// ends are checkpoint files, never written after creation.
func (c *copier) linkPrev(dst, prev int, name string, st stat) bool {
	if !c.unchanged(prev, name, st) {
		return false
	}
	if unix.Linkat(prev, name, dst, name, 0) != nil {
		return false // EMLINK and the like: copy instead
	}
	c.files++
	c.linked++
	c.size += st.size
	return true
}

// unchanged: the previous checkpoint's copy of name (in prev) can stand
// for st's file, which is not racy.
func (c *copier) unchanged(prev int, name string, st stat) bool {
	if prev < 0 || st.mtim.Nano() >= c.linkBefore {
		return false
	}
	p, err := lstatAt(prev, name)
	return err == nil && p.typ() == unix.S_IFREG && p.size == st.size && p.mtim == st.mtim &&
		p.perm() == st.perm() && (!c.chown || p.uid == st.uid && p.gid == st.gid)
}

// fill copies in's data (size bytes) into the new, empty out: a clone
// where the filesystem can, else an in-kernel copy of each data extent
// (SEEK_DATA/SEEK_HOLE) in chunks, leaving holes unwritten.
func (c *copier) fill(out, in int, size int64) error {
	if c.reflink {
		if clone(out, in) == nil {
			return nil
		}
		// Another filesystem, or none that clones: copy from now on.
		c.reflink, c.fellBack = false, true
		if err := unix.Ftruncate(out, 0); err != nil {
			return err
		}
	}
	for off := int64(0); off < size; {
		data, end, ok := extent(in, off, size)
		if !ok {
			break // only a hole is left
		}
		if err := c.copyRange(out, in, data, end-data); err != nil {
			return err
		}
		off = end
	}
	return unix.Ftruncate(out, size) // a trailing hole
}

// extent is the next data extent [data, end) at or after off, bounded by
// size; ok is false when only a hole is left. A filesystem without
// SEEK_DATA has all of the rest as data.
func extent(fd int, off, size int64) (data, end int64, ok bool) {
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, 0, false
	}
	if err != nil {
		return off, size, true
	}
	if data >= size {
		return 0, 0, false
	}
	end, err = unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil || end > size {
		end = size
	}
	return data, end, true
}

// copyRange copies n bytes at off from in to the same offset in out, in
// chunks between context checks; pread/pwrite where copy_file_range is
// refused (another filesystem, an old kernel).
func (c *copier) copyRange(out, in int, off, n int64) error {
	for n > 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		chunk := int(min(n, copyChunk))
		roff, woff := off, off
		var k int
		err := ignoringEINTR(func() (err error) {
			k, err = copyFileRange(in, &roff, out, &woff, chunk)
			return err
		})
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			k, err = pcopy(out, in, off, chunk)
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return nil // the source shrank under us
		}
		off += int64(k)
		n -= int64(k)
	}
	return nil
}

// pcopy copies up to n bytes at off with pread and pwrite.
func pcopy(out, in int, off int64, n int) (int, error) {
	buf := make([]byte, min(n, 1<<20))
	done := 0
	for done < n {
		r, err := unix.Pread(in, buf[:min(len(buf), n-done)], off+int64(done))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		if r == 0 {
			break
		}
		for w := 0; w < r; {
			k, err := unix.Pwrite(out, buf[w:r], off+int64(done+w))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return done, err
			}
			w += k
		}
		done += r
	}
	return done, nil
}

// attrs gives name in dir (fd: the open file, or -1) st's owner (as
// root), permission bits (not for symlinks, which have none that count)
// and times. Owner goes first: chown clears set-id bits.
func (c *copier) attrs(dir int, name string, fd int, st stat) error {
	link := st.typ() == unix.S_IFLNK
	if c.chown {
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, int(st.uid), int(st.gid))
		} else {
			err = unix.Fchownat(dir, name, int(st.uid), int(st.gid), unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if !link {
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, st.perm())
		} else {
			// dir is a tree of ours and name was just made: not a symlink.
			err = unix.Fchmodat(dir, name, st.perm(), 0)
		}
		if err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	if err := setTimes(dir, name, st); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}
