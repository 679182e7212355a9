package imagestore

import (
	"context"
	"fmt"
	"runtime"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// maxConfigBytes bounds an image config fetched from a registry: the
// registry's manifest names its size, and remote reads the whole config
// into memory.
const maxConfigBytes = 16 << 20

// ImportRemote imports image ref ("registry/repo:tag" or "…@sha256:…")
// from its registry; for an index, the image of this machine's platform.
// Only the manifest and the config are fetched before the store looks for
// the rootfs their diff IDs name, so an image already stored downloads no
// layer. Layers are as hostile as an archive's and under the same bounds;
// a registry on localhost or 127.0.0.0/8 is spoken to in plain HTTP
// (go-containerregistry's rule), any other over HTTPS.
func (s *Store) ImportRemote(ctx context.Context, ref string) (Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: image reference: %w", err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx),
		// Credentials come from the usual docker config
		// ($DOCKER_CONFIG/config.json, ~/.docker/config.json, its
		// credential helpers); anonymous when it has none for the registry.
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}))
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: fetch %s: %w", r, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, fmt.Errorf("imagestore: fetch %s: manifest: %w", r, err)
	}
	if m.Config.Size > maxConfigBytes {
		return Image{}, fmt.Errorf("%w: %s: config of %d bytes (at most %d)", ErrTooLarge, r, m.Config.Size, maxConfigBytes)
	}
	return s.store(ctx, img)
}
