package imagestore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// ErrTooLarge is wrapped by the errors of an image over MaxBytes or
// MaxEntries.
var ErrTooLarge = errors.New("image exceeds the store's bounds")

// errHostile is wrapped by the errors of a layer entry that is refused.
var errHostile = errors.New("refused")

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// budget is what is left of an image's bounds, shared by all its layers.
type budget struct {
	cfg     Config
	bytes   int64
	entries int
}

func newBudget(cfg Config) *budget {
	return &budget{cfg: cfg, bytes: cfg.MaxBytes, entries: cfg.MaxEntries}
}

// extractor applies tar streams to a directory through an os.Root, so no
// name, symlink or hard link in a stream can make a write land outside it.
type extractor struct {
	root   *os.Root
	budget *budget
	// plain admits only directories and regular files and knows no
	// whiteouts: for an OCI layout archive, which has nothing else.
	plain bool
	// touched holds the current layer's entries and their parents: a
	// whiteout hides only what lower layers made.
	touched map[string]bool
	// skipped counts device nodes, FIFOs and other special entries.
	skipped int
}

// apply extracts one tar stream (a layer) on top of what is there.
func (e *extractor) apply(ctx context.Context, r io.Reader) error {
	e.touched = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if e.budget.entries--; e.budget.entries < 0 {
			return fmt.Errorf("%w: more than MaxEntries (%d) entries", ErrTooLarge, e.budget.cfg.MaxEntries)
		}
		if err := e.entry(hdr, tr); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
}

// localName returns name cleaned, or an error when it is absolute or has a
// ".." element: such names are refused, not rewritten, because no honest
// image builder writes them.
func localName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: absolute path", errHostile)
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return "", fmt.Errorf("%w: path with \"..\"", errHostile)
		}
	}
	if name == "" {
		return "", fmt.Errorf("%w: empty name", errHostile)
	}
	return path.Clean(name), nil
}

func (e *extractor) entry(hdr *tar.Header, tr io.Reader) error {
	name, err := localName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "." {
		return nil // the root itself: the store decides its mode
	}
	dir, base := path.Split(name)
	if !e.plain && strings.HasPrefix(base, whiteoutPrefix) {
		return e.whiteout(path.Clean(dir), base)
	}
	kind := hdr.Typeflag
	if kind == tar.TypeGNUSparse {
		kind = tar.TypeReg // tar.Reader expands it; hdr.Size is the full size
	}
	if e.plain && kind != tar.TypeDir && kind != tar.TypeReg {
		return fmt.Errorf("%w: an OCI layout archive holds only directories and regular files", errHostile)
	}
	switch kind {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		e.skipped++ // devices, FIFOs: a sandbox gets its own /dev
		return nil
	}
	if err := e.root.MkdirAll(path.Clean(dir), 0o755); err != nil {
		return err
	}
	e.touch(name)
	// Owner rwx on directories while unpacking; the store strips every
	// write bit when the image is complete (makeReadOnly).
	perm := hdr.FileInfo().Mode().Perm()
	if kind == tar.TypeDir {
		if fi, err := e.root.Lstat(name); err == nil && fi.IsDir() {
			return e.root.Chmod(name, perm|0o700)
		}
	}
	// An entry replaces whatever lower layers had under its name; removing
	// a symlink removes the link, never what it points to.
	if err := e.root.RemoveAll(name); err != nil {
		return err
	}
	switch kind {
	case tar.TypeDir:
		if err := e.root.Mkdir(name, 0o700); err != nil {
			return err
		}
		return e.root.Chmod(name, perm|0o700)
	case tar.TypeSymlink:
		// Stored as is, absolute or dangling: it is resolved inside the
		// sandbox, never by the store (os.Root refuses to follow it out).
		if hdr.Linkname == "" {
			return fmt.Errorf("%w: symlink with no target", errHostile)
		}
		return e.root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		return e.link(name, hdr.Linkname)
	default:
		return e.file(name, perm, hdr.Size, tr)
	}
}

func (e *extractor) file(name string, perm fs.FileMode, size int64, r io.Reader) error {
	if size > e.budget.bytes {
		return fmt.Errorf("%w: more than MaxBytes (%d) bytes", ErrTooLarge, e.budget.cfg.MaxBytes)
	}
	f, err := e.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	e.budget.bytes -= n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Set after writing so a mode without owner write still unpacks;
	// fs.FileMode.Perm has no setuid, setgid or sticky bit.
	return e.root.Chmod(name, perm)
}

// link makes a hard link to an entry already in the tree: the target is
// checked like an entry name and must exist and not be a directory.
func (e *extractor) link(name, target string) error {
	t, err := localName(target)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", target, err)
	}
	if t == name || t == "." {
		return fmt.Errorf("%w: hard link to itself or the root", errHostile)
	}
	fi, err := e.root.Lstat(t)
	if err != nil {
		return fmt.Errorf("%w: hard link target %q is not in the image", errHostile, target)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: hard link to directory %q", errHostile, target)
	}
	// linkat without AT_SYMLINK_FOLLOW: a link to a symlink is a symlink.
	return e.root.Link(t, name)
}

// whiteout deletes what lower layers have under dir/name, or (opaque
// marker) everything lower layers have in dir.
func (e *extractor) whiteout(dir, base string) error {
	if base == opaqueMarker {
		e.touch(dir)
		return e.clearLower(dir)
	}
	hidden := base[len(whiteoutPrefix):]
	if hidden == "" || hidden == "." || hidden == ".." {
		return fmt.Errorf("%w: malformed whiteout", errHostile)
	}
	target := path.Join(dir, hidden)
	if e.touched[target] {
		return nil // this layer's own entry: a whiteout hides lower layers only
	}
	return e.root.RemoveAll(target)
}

// clearLower removes from dir what the current layer did not make.
func (e *extractor) clearLower(dir string) error {
	if fi, err := e.root.Lstat(dir); err != nil || !fi.IsDir() {
		return nil // nothing below to hide
	}
	f, err := e.root.Open(dir)
	if err != nil {
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, de := range ents {
		p := path.Join(dir, de.Name())
		switch {
		case !e.touched[p]:
			err = e.root.RemoveAll(p)
		case de.IsDir():
			err = e.clearLower(p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// touch marks name and its parents as made by the current layer.
func (e *extractor) touch(name string) {
	for p := name; p != "." && !e.touched[p]; p = path.Dir(p) {
		e.touched[p] = true
	}
}
