package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/imagestore"
)

// imageGCTimeout bounds one collection (removing a multi-GB tree takes
// seconds).
const imageGCTimeout = 5 * time.Minute

// systemRooter is a backend whose sandboxes run image rootfs directories
// of the store (process.Process.SystemRoots): its configured one and its
// live sandboxes'.
type systemRooter interface {
	SystemRoots(ctx context.Context) ([]string, error)
}

// imageGC collects the image store ({data_dir}/images) of the process
// backend at start-up and every quarter of its grace: entries that no
// configured template, no process_image and no live sandbox (of any
// replica sharing data_dir: their states are in the same state dir) uses,
// once unused for the grace (see imagestore.Store.Collect). Each pass also
// marks this replica's images used, so a replica sharing the store with
// another configuration keeps them while it runs.
type imageGC struct {
	store *imagestore.Store
	// templates are the rootfs of the configured templates.
	templates []string
	backend   systemRooter
	grace     time.Duration
	log       *slog.Logger
}

// newImageGC is the collector of cfg's store, nil when there is nothing
// to collect: collection off, another backend, or no store on disk.
func newImageGC(cfg config.Config, be any, log *slog.Logger) (*imageGC, error) {
	rooter, ok := be.(systemRooter)
	if !ok || cfg.Process.ImageGCGrace < 0 {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "images")); err != nil {
		return nil, nil // never imported into: nothing to collect
	}
	store, err := openImageStore(cfg)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	g := &imageGC{store: store, backend: rooter, grace: cfg.Process.ImageGCGrace, log: log.With("component", "image-gc")}
	if g.grace == 0 {
		g.grace = imagestore.DefaultGCGrace
	}
	for _, t := range cfg.Pool.Templates {
		if t.Backend.RootFS != "" {
			g.templates = append(g.templates, t.Backend.RootFS)
		}
	}
	return g, nil
}

// Run collects at once, then every quarter of the grace, until ctx ends.
func (g *imageGC) Run(ctx context.Context) {
	if g == nil {
		return
	}
	if err := g.Pass(ctx); err != nil && ctx.Err() == nil {
		g.log.Warn("image store collection failed", "err", err)
	}
	t := time.NewTicker(g.grace / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.Pass(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn("image store collection failed", "err", err)
			}
		}
	}
}

// Pass runs one collection. When the backend cannot tell what its live
// sandboxes run, nothing is collected.
func (g *imageGC) Pass(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, imageGCTimeout)
	defer cancel()
	live, err := g.backend.SystemRoots(ctx)
	if err != nil {
		return fmt.Errorf("what live sandboxes run: %w; nothing collected", err)
	}
	got, err := g.store.Collect(ctx, append(slices.Clone(g.templates), live...), g.grace)
	for _, name := range got.Removed {
		g.log.Info("image store entry removed: no template or live sandbox uses it", "entry", name)
	}
	if len(got.Foreign) > 0 {
		g.log.Warn("image store holds entries it never makes: left alone", "entries", got.Foreign)
	}
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	return nil
}
