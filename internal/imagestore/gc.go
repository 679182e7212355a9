package imagestore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultGCGrace is how long an unreferenced rootfs or an abandoned
// temporary file survives Collect by default; MinGCGrace the least a
// caller should give: the gateway's bound on one import, so an import in
// progress (its temporaries, a rootfs it found) is never collected.
const (
	DefaultGCGrace = time.Hour
	MinGCGrace     = 10 * time.Minute
)

// Collected is what one Collect did. Names are store entries (a rootfs's
// chain ID, a temporary file's name), never host paths.
type Collected struct {
	// Removed are the entries deleted.
	Removed []string
	// Kept counts the rootfs entries kept: referenced, or used within the
	// grace.
	Kept int
	// Foreign are entries the store never makes (a symlink, a stray file):
	// left alone, so that nothing outside the store is ever touched.
	Foreign []string
}

// Collect removes what nothing needs any more: every rootfs whose path is
// not in keep and that no import or Collect has used for grace (its
// directory's modification time, which imports and Collect move to now
// when they find or name it: a replica sharing the store keeps its
// images by running Collect itself, or by importing them), and every
// temporary directory or archive of an import older than grace (a crashed
// one). keep holds the rootfs paths still referenced: configured images,
// and those of live sandboxes, whose jails see the same files (a removal
// under a mount would remove them from the running sandbox too).
//
// Only what the store makes is removed: a real directory under a rootfs
// name, a temporary entry under its prefix. Everything is deleted through
// an os.Root opened on the store, and symlinks are never followed, so a
// symlink planted in the store (as an entry or inside one) only ever loses
// itself, never its target.
func (s *Store) Collect(ctx context.Context, keep []string, grace time.Duration) (Collected, error) {
	var out Collected
	root, err := os.OpenRoot(s.rootfs)
	if err != nil {
		return out, fmt.Errorf("imagestore: collect: %w", err)
	}
	defer root.Close()
	// Compared as files, not names: a replica that spells data_dir
	// another way (relative, through a symlink) names the same rootfs.
	var kept []os.FileInfo
	for _, p := range keep {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil: // cannot tell whether it is one of ours
			return out, fmt.Errorf("imagestore: collect: %w", err)
		default:
			kept = append(kept, fi)
		}
	}
	cutoff := time.Now().Add(-grace)
	entries, err := os.ReadDir(s.rootfs)
	if err != nil {
		return out, fmt.Errorf("imagestore: collect: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		name := e.Name()
		isTmp := strings.HasPrefix(name, ".tmp-")
		if !e.IsDir() || !isTmp && !validChain(name) {
			out.Foreign = append(out.Foreign, name)
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if slices.ContainsFunc(kept, func(k os.FileInfo) bool { return os.SameFile(k, fi) }) {
			s.touch(root, name)
			out.Kept++
			continue
		}
		if fi.ModTime().After(cutoff) {
			if !isTmp {
				out.Kept++
			}
			continue
		}
		if err := removeIn(root, name); err != nil {
			errs = append(errs, err)
			continue
		}
		out.Removed = append(out.Removed, name)
	}
	removed, err := s.collectTmp(cutoff)
	out.Removed = append(out.Removed, removed...)
	return out, errors.Join(append(errs, err)...)
}

// collectTmp removes the layout archives of imports older than cutoff
// from the store's tmp (an import reads them within its bound).
func (s *Store) collectTmp(cutoff time.Time) ([]string, error) {
	root, err := os.OpenRoot(s.tmp)
	if err != nil {
		return nil, fmt.Errorf("imagestore: collect: %w", err)
	}
	defer root.Close()
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return nil, fmt.Errorf("imagestore: collect: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		ours := e.IsDir() && strings.HasPrefix(name, "oci-") || e.Type().IsRegular() && strings.HasPrefix(name, "archive-")
		if fi, err := e.Info(); !ours || err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		if err := removeIn(root, name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "tmp/"+name)
	}
	return removed, errors.Join(errs...)
}

// validChain: a rootfs name, the hex of a sha256 chain ID.
func validChain(name string) bool {
	b, err := hex.DecodeString(name)
	return err == nil && len(b) == 32 && strings.ToLower(name) == name
}

// touch marks the rootfs name as used now (see Collect); a failure only
// makes it collectable sooner if nothing else names it.
func (s *Store) touch(root *os.Root, name string) {
	if fi, err := root.Lstat(name); err != nil || !fi.IsDir() {
		return // a symlink is no rootfs: never touch what it names
	}
	now := time.Now()
	_ = root.Chtimes(name, now, now)
}

// touchPath is touch for a rootfs path of the store.
func (s *Store) touchPath(dir string) {
	root, err := os.OpenRoot(s.rootfs)
	if err != nil {
		return
	}
	defer root.Close()
	s.touch(root, filepath.Base(dir))
}

// removeIn removes the entry name of root and everything under it: the
// read-only directories made writable first (never through a symlink:
// fs.WalkDir does not follow them, and os.Root refuses a path that leaves
// the entry), then deleted by os.Root.RemoveAll, which removes a symlink
// itself, never what it names.
func removeIn(root *os.Root, name string) error {
	if fi, err := root.Lstat(name); err == nil && fi.IsDir() {
		if sub, err := root.OpenRoot(name); err == nil {
			_ = fs.WalkDir(sub.FS(), ".", func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					_ = sub.Chmod(p, 0o700)
				}
				return nil
			})
			sub.Close()
		}
	}
	if err := root.RemoveAll(name); err != nil {
		return fmt.Errorf("imagestore: collect %s: %w", name, err)
	}
	return nil
}
