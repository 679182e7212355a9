// Package imagestore keeps the root filesystems of container images on
// disk, flattened, content-addressed and read-only, for the process jail to
// mount as the lower layer of a sandbox's overlay.
//
// # Layout
//
//	{Dir}/rootfs/sha256/{chain ID hex}/        one flattened rootfs per layer stack
//	{Dir}/rootfs/sha256/.tmp-{chain ID hex}-*  an unpack in progress
//	{Dir}/tmp/                                 OCI layout archives being read
//
// A rootfs is named by the chain ID of the image's layers (the OCI
// image-spec's ChainID of its config's diff IDs), so images that differ only
// in their config share one. Each layer's uncompressed stream is hashed while
// it is unpacked and must match its diff ID, so the name is the content. The
// layers are applied in order into a temporary directory beside the final
// one, every write bit but the owner's (the gateway's uid) is removed, and
// the directory is renamed into place:
// a rootfs under its final name is always complete. Concurrent imports of
// the same content (goroutines or processes) may each unpack, but one rename
// wins and the others discard their copy; an import that finds the rootfs
// in place unpacks nothing. Temporary directories left by a crashed process
// are removed by Collect once older than its grace.
//
// # Collection
//
// Store.Collect removes the rootfs entries nothing references any more
// (no configured image, no live sandbox) once unused for a grace period,
// and abandoned temporary entries; see Collect.
//
// # Hostile layers
//
// Every write goes through an os.Root opened on the temporary directory, so
// no name, symlink or hard link can make it land outside. On top of that:
//
//   - entry names that are absolute or have a ".." element are refused (the
//     import fails, naming the entry), not rewritten;
//   - symlinks are stored as they are, absolute or dangling, and never
//     followed out of the tree: an entry written through a symlink that leaves
//     the tree (absolute targets included) fails the import;
//   - a hard link must name an entry already in the tree (checked like an
//     entry name) that is not a directory; a link to a symlink is a symlink;
//   - device nodes, FIFOs and other special entries are skipped and counted
//     (Image.Skipped): a sandbox gets its own /dev;
//   - setuid, setgid and sticky bits are dropped and ownership is not applied:
//     every file belongs to the store's owner. Directories keep owner rwx
//     while unpacking, so their final mode has at least owner r-x;
//   - OCI whiteouts (.wh.name) and opaque directories (.wh..wh..opq) delete
//     what lower layers made, as the image-spec says.
//
// # Bounds
//
// Across all of an image's layers, at most Config.MaxBytes bytes of file
// content are written and at most Config.MaxEntries tar entries (whiteouts
// included) are read; the uncompressed streams are read up to MaxBytes plus
// 16 KiB per MaxEntries (headers and padding). Exceeding a bound fails the
// import with an error wrapping ErrTooLarge and naming the bound. A failed
// import removes its temporary directory and leaves nothing under a final
// name.
package imagestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Defaults for the zero Config.
const (
	DefaultMaxBytes   int64 = 8 << 30
	DefaultMaxEntries       = 500_000
)

// streamSlackPerEntry is how much of a layer stream besides file content
// (tar headers, PAX records, padding) each allowed entry may use.
const streamSlackPerEntry = 16 << 10

// Config configures a Store. Its zero value, with Dir set, is the default.
type Config struct {
	// Dir is the store's directory (required); it is created if missing.
	Dir string
	// MaxBytes bounds the file content written for one image (default
	// DefaultMaxBytes).
	MaxBytes int64
	// MaxEntries bounds the tar entries read for one image (default
	// DefaultMaxEntries).
	MaxEntries int
}

// Validate reports a Config that Open would refuse.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("imagestore: Dir is required")
	case c.MaxBytes < 0:
		return errors.New("imagestore: MaxBytes must not be negative")
	case c.MaxEntries < 0:
		return errors.New("imagestore: MaxEntries must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	return c
}

// Image is an imported image: its stored rootfs and what a sandbox needs of
// its config.
type Image struct {
	// ID is the digest of the image's config ("sha256:…").
	ID string
	// RootFS is the absolute path of the flattened, read-only rootfs.
	RootFS string

	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	User       string

	// Skipped counts the special entries (devices, FIFOs) left out when
	// this import unpacked the rootfs; 0 when it was already stored.
	Skipped int
}

// Store is a directory of image root filesystems. Its methods are safe for
// concurrent use, also by several processes sharing Dir.
type Store struct {
	cfg    Config
	rootfs string // {Dir}/rootfs/sha256
	tmp    string // {Dir}/tmp

	unpacks atomic.Int64 // rootfs unpacked by this Store, for tests
}

// Open opens the store at cfg.Dir, creating its directories.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("imagestore: %w", err)
	}
	cfg.Dir = dir
	s := &Store{cfg: cfg, rootfs: filepath.Join(dir, "rootfs", "sha256"), tmp: filepath.Join(dir, "tmp")}
	if err := os.MkdirAll(s.rootfs, 0o755); err != nil {
		return nil, fmt.Errorf("imagestore: %w", err)
	}
	if err := os.MkdirAll(s.tmp, 0o700); err != nil {
		return nil, fmt.Errorf("imagestore: %w", err)
	}
	return s, nil
}

// store makes sure img's rootfs is in the store and describes it. The ID
// is the hash of the config as read and the rootfs name comes from its diff
// IDs, which unpack checks against the layers, so no manifest is trusted
// (nor computed: for an uncompressed docker save archive that would
// compress every layer).
func (s *Store) store(ctx context.Context, img v1.Image) (Image, error) {
	id, err := img.ConfigName()
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: image config: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: image config: %w", err)
	}
	diffIDs := cf.RootFS.DiffIDs
	chain, err := chainID(diffIDs)
	if err != nil {
		return Image{}, err
	}
	out := Image{
		ID:         id.String(),
		RootFS:     filepath.Join(s.rootfs, chain),
		Env:        cf.Config.Env,
		Entrypoint: cf.Config.Entrypoint,
		Cmd:        cf.Config.Cmd,
		WorkingDir: cf.Config.WorkingDir,
		User:       cf.Config.User,
	}
	if fi, err := os.Lstat(out.RootFS); err == nil && fi.IsDir() {
		s.touchPath(out.RootFS) // in use: see Collect
		return out, ownerWritable(out.RootFS, fi)
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: image layers: %w", err)
	}
	if len(layers) != len(diffIDs) {
		return Image{}, fmt.Errorf("imagestore: image has %d layers but its config %d diff IDs", len(layers), len(diffIDs))
	}
	out.Skipped, err = s.unpack(ctx, layers, diffIDs, chain)
	return out, err
}

// chainID is the image-spec's ChainID of diffIDs, as hex: the rootfs name.
func chainID(diffIDs []v1.Hash) (string, error) {
	chain := ""
	for _, d := range diffIDs {
		if d.Algorithm != "sha256" {
			return "", fmt.Errorf("imagestore: diff ID %q: only sha256 is supported", d)
		}
		if chain == "" {
			chain = d.String()
			continue
		}
		sum := sha256.Sum256([]byte(chain + " " + d.String()))
		chain = "sha256:" + hex.EncodeToString(sum[:])
	}
	if chain == "" { // no layers: the empty rootfs
		sum := sha256.Sum256(nil)
		return hex.EncodeToString(sum[:]), nil
	}
	return strings.TrimPrefix(chain, "sha256:"), nil
}

// unpack applies layers into a temporary directory beside the final one,
// makes it read-only and renames it to chain.
func (s *Store) unpack(ctx context.Context, layers []v1.Layer, diffIDs []v1.Hash, chain string) (skipped int, err error) {
	tmp, err := os.MkdirTemp(s.rootfs, ".tmp-"+chain+"-")
	if err != nil {
		return 0, fmt.Errorf("imagestore: %w", err)
	}
	defer func() {
		if err != nil {
			_ = removeTree(tmp)
		}
	}()
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return 0, fmt.Errorf("imagestore: %w", err)
	}
	defer root.Close()
	b := newBudget(s.cfg)
	stream := s.cfg.MaxBytes + int64(s.cfg.MaxEntries)*streamSlackPerEntry
	x := &extractor{root: root, budget: b}
	for i, l := range layers {
		if err := applyLayer(ctx, x, l, diffIDs[i], &stream); err != nil {
			return 0, fmt.Errorf("imagestore: layer %d (%s): %w", i, diffIDs[i], err)
		}
	}
	if err := makeReadOnly(root); err != nil {
		return 0, fmt.Errorf("imagestore: %w", err)
	}
	s.unpacks.Add(1)
	final := filepath.Join(s.rootfs, chain)
	if err := os.Rename(tmp, final); err != nil {
		// Another import stored the same content first: theirs is as good.
		if fi, serr := os.Lstat(final); serr == nil && fi.IsDir() {
			return x.skipped, removeTree(tmp)
		}
		return 0, fmt.Errorf("imagestore: %w", err)
	}
	s.touchPath(final)
	return x.skipped, nil
}

// applyLayer extracts l, checking its uncompressed stream against diffID
// and the image's stream bound (*left, decreased by what is read).
func applyLayer(ctx context.Context, x *extractor, l v1.Layer, diffID v1.Hash, left *int64) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	lr := &io.LimitedReader{R: rc, N: *left + 1}
	r := io.TeeReader(lr, h)
	err = x.apply(ctx, r)
	if err == nil {
		// The hash covers the whole stream, padding after the tar's end too.
		_, err = io.Copy(io.Discard, r)
	}
	*left = lr.N - 1
	if *left < 0 {
		return fmt.Errorf("%w: layer streams over MaxBytes plus %d bytes per MaxEntries", ErrTooLarge, streamSlackPerEntry)
	}
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return fmt.Errorf("%w: uncompressed content is sha256:%s, not its diff ID", errHostile, got)
	}
	return nil
}

// makeReadOnly removes the group and other write bits in the tree
// (symlinks have none) and gives every entry its owner's: the owner is the
// gateway's uid, and a sandbox with a writable layer sees the image as its
// own through an idmapped mount (jail.Spec.Layer), so the owner's bits are
// what it may write, in its layer only. Nothing writes the store itself:
// the jail mounts it read-only.
func makeReadOnly(root *os.Root) error {
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if p == "." {
			return root.Chmod(p, 0o755) // readable by the sandbox's user
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return root.Chmod(p, fi.Mode().Perm()&^0o022|0o200)
	})
}

// ownerWritable gives a rootfs stored before makeReadOnly kept the owner's
// write bits (its root is 0555) those bits, once.
func ownerWritable(dir string, fi fs.FileInfo) error {
	if fi.Mode().Perm()&0o200 != 0 {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("imagestore: %w", err)
	}
	defer root.Close()
	if err := makeReadOnly(root); err != nil {
		return fmt.Errorf("imagestore: %w", err)
	}
	return nil
}

// removeTree removes a tree that makeReadOnly may have made read-only.
func removeTree(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
