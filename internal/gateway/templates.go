package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend/docker"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/imagestore"
)

// imageImportTimeout bounds each start-up import (a multi-GB image unpacks
// in tens of seconds; one already stored, at once).
// The image store's collection grace is at least this (MinGCGrace).
const imageImportTimeout = imagestore.MinGCGrace

func openImageStore(cfg config.Config) (*imagestore.Store, error) {
	return imagestore.Open(imagestore.Config{Dir: filepath.Join(cfg.DataDir, "images")})
}

// timedImport runs one bounded import and logs what it took.
func timedImport(ctx context.Context, log *slog.Logger, what string, imp func(context.Context) (imagestore.Image, error)) (imagestore.Image, error) {
	ctx, cancel := context.WithTimeout(ctx, imageImportTimeout)
	defer cancel()
	start := time.Now()
	img, err := imp(ctx)
	if err != nil {
		return img, err
	}
	log.Info(what+" imported: its isolated sandboxes run the image's userland", "image", img.ID,
		"duration", time.Since(start).Round(time.Millisecond).String(), "special_entries_skipped", img.Skipped)
	return img, nil
}

// importTemplateImages imports, for the process backend, every template's
// image into {data_dir}/images (shared layers once: the store is content
// addressed) and completes cfg.Pool.Templates with its rootfs and
// environment.
func importTemplateImages(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	sources := cfg.TemplateSources()
	if len(sources) == 0 {
		return nil
	}
	store, err := openImageStore(*cfg)
	if err != nil {
		return fmt.Errorf("templates: %w", err)
	}
	for i, t := range cfg.Pool.Templates {
		src, ok := sources[t.Name]
		if !ok {
			continue
		}
		img, err := timedImport(ctx, log, "template "+t.Name, func(ctx context.Context) (imagestore.Image, error) {
			return importTemplate(ctx, store, cfg.Docker.Host, src, log.With("template", t.Name))
		})
		if err != nil {
			return fmt.Errorf("templates: %s: %w", t.Name, err)
		}
		cfg.Pool.Templates[i].Backend.RootFS, cfg.Pool.Templates[i].Backend.RootEnv = img.RootFS, img.Env
	}
	return nil
}

// importTemplate imports src's rootfs (an archive or an OCI layout
// directory), or else its image from the Docker engine at host, or else,
// when the engine lacks the image or there is no engine, from the image's
// registry. An image whose layers the store already holds is neither
// exported nor downloaded again.
func importTemplate(ctx context.Context, store *imagestore.Store, host string, src config.TemplateConfig, log *slog.Logger) (imagestore.Image, error) {
	if src.RootFS != "" {
		log.Info("template image source", "source", "rootfs")
		fi, err := os.Stat(src.RootFS)
		if err != nil {
			return imagestore.Image{}, fmt.Errorf("rootfs: %w", err)
		}
		if fi.IsDir() {
			return store.ImportLayout(ctx, src.RootFS)
		}
		return store.ImportArchive(ctx, src.RootFS)
	}
	ei, err := docker.InspectImage(ctx, host, src.Image)
	if cerrdefs.IsNotFound(err) || client.IsErrConnectionFailed(err) {
		// The reference, never a credential: those stay in the docker
		// config the registry pull reads.
		engine := "unreachable"
		if cerrdefs.IsNotFound(err) {
			engine = "image not found"
		}
		log.Info("template image source", "source", "registry", "image", src.Image, "engine", engine)
		return store.ImportRemote(ctx, src.Image)
	}
	if err != nil {
		return imagestore.Image{}, err
	}
	log.Info("template image source", "source", "docker engine", "image", src.Image)
	if dir, ok := store.Stored(ei.DiffIDs); ok {
		return imagestore.Image{ID: src.Image, RootFS: dir, Env: ei.Env}, nil
	}
	return store.ImportWritten(ctx, func(w io.Writer) error { return docker.SaveImage(ctx, host, src.Image, w) })
}
