package imagestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// maxIndexDepth bounds how deep image indexes may nest in a layout.
const maxIndexDepth = 4

// ImportArchive imports the image in a tarball: `docker save` output (one
// image) or an OCI image layout packed in a tar (`docker buildx --output
// type=oci`, skopeo oci-archive).
func (s *Store) ImportArchive(ctx context.Context, path string) (Image, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err == nil {
		return s.store(ctx, img)
	}
	// No manifest.json: an OCI layout archive, read once unpacked.
	img2, cleanup, err2 := s.unpackLayoutArchive(ctx, path)
	if err2 != nil {
		return Image{}, fmt.Errorf("imagestore: neither a docker save archive (%v) nor an OCI layout archive: %w", err, err2)
	}
	defer cleanup()
	return s.store(ctx, img2)
}

// ImportLayout imports the image of an OCI image layout directory. When the
// layout holds several images, the one for this machine's platform is taken.
// The directory is the caller's (its symlinks are followed when reading
// it); the layers in it are treated as hostile like any other.
func (s *Store) ImportLayout(ctx context.Context, dir string) (Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: OCI layout: %w", err)
	}
	img, err := pickImage(idx)
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: OCI layout: %w", err)
	}
	return s.store(ctx, img)
}

// unpackLayoutArchive unpacks an OCI layout archive into the store's tmp,
// under the same bounds as an image (directories and regular files only, so
// no symlink in it can point the layout reader at a host file).
func (s *Store) unpackLayoutArchive(ctx context.Context, path string) (v1.Image, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	dir, err := os.MkdirTemp(s.tmp, "oci-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	root, err := os.OpenRoot(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	defer root.Close()
	x := &extractor{root: root, budget: newBudget(s.cfg), plain: true}
	if err := x.apply(ctx, f); err != nil {
		cleanup()
		return nil, nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err == nil {
		var img v1.Image
		if img, err = pickImage(idx); err == nil {
			return img, cleanup, nil
		}
	}
	cleanup()
	return nil, nil, err
}

// pickImage returns the one image in idx (nested indexes included) that
// has no platform or this machine's platform.
func pickImage(idx v1.ImageIndex) (v1.Image, error) {
	var found []v1.Hash
	var img v1.Image
	var walk func(idx v1.ImageIndex, depth int) error
	walk = func(idx v1.ImageIndex, depth int) error {
		if depth > maxIndexDepth {
			return errors.New("image indexes nested too deep")
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return err
		}
		for _, d := range im.Manifests {
			switch {
			case d.MediaType.IsIndex():
				child, err := idx.ImageIndex(d.Digest)
				if err != nil {
					return err
				}
				if err := walk(child, depth+1); err != nil {
					return err
				}
			case d.MediaType.IsImage():
				if p := d.Platform; p != nil && (p.OS != runtime.GOOS || p.Architecture != runtime.GOARCH) {
					continue // another platform, or an attestation (unknown/unknown)
				}
				if len(found) > 0 && found[0] == d.Digest {
					continue // the same image listed twice (two tags)
				}
				found = append(found, d.Digest)
				if img, err = idx.Image(d.Digest); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(idx, 0); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no image for %s/%s", runtime.GOOS, runtime.GOARCH)
	case 1:
		return img, nil
	}
	return nil, fmt.Errorf("%d images for %s/%s; import one at a time", len(found), runtime.GOOS, runtime.GOARCH)
}

// Stored returns the rootfs of the image whose layers have diffIDs
// ("sha256:…", bottom first) when the store already holds it: an importer
// that can tell the diff IDs cheaply (the Docker engine's inspect) then
// skips exporting the image.
func (s *Store) Stored(diffIDs []string) (string, bool) {
	hashes := make([]v1.Hash, len(diffIDs))
	for i, d := range diffIDs {
		h, err := v1.NewHash(d)
		if err != nil {
			return "", false
		}
		hashes[i] = h
	}
	chain, err := chainID(hashes)
	if err != nil {
		return "", false
	}
	dir := filepath.Join(s.rootfs, chain)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || ownerWritable(dir, fi) != nil {
		return "", false
	}
	s.touchPath(dir) // in use: see Collect
	return dir, true
}

// ImportWritten imports the archive (as ImportArchive takes it) that write
// writes, kept in the store's temporary directory until imported.
func (s *Store) ImportWritten(ctx context.Context, write func(io.Writer) error) (Image, error) {
	f, err := os.CreateTemp(s.tmp, "archive-*.tar")
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: %w", err)
	}
	defer os.Remove(f.Name())
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: write archive: %w", err)
	}
	return s.ImportArchive(ctx, f.Name())
}
