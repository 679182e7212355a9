package gateway

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/pool"
)

type roots struct {
	live []string
	err  error
}

func (r roots) SystemRoots(context.Context) ([]string, error) { return r.live, r.err }

// The gateway's collection keeps the configured templates' rootfs and the
// live sandboxes' (the backend's SystemRoots), removes the rest once
// unused past the grace, collects nothing when the backend cannot tell
// what its sandboxes run, and is off without a store or with grace never.
func TestImageGC(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	if g, err := newImageGC(cfg, roots{}, log); g != nil || err != nil {
		t.Fatalf("no store on disk: collector %v (%v), want none", g, err)
	}
	base := filepath.Join(cfg.DataDir, "images", "rootfs", "sha256")
	entry := func(c string) string { return filepath.Join(base, strings.Repeat(c, 64)) }
	old := time.Now().Add(-2 * time.Hour)
	for _, c := range []string{"a", "b", "c"} {
		if err := os.MkdirAll(entry(c), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(entry(c), old, old); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Pool.Templates = []pool.Template{{Name: "py", Backend: backend.Template{RootFS: entry("a")}}}
	off := cfg
	off.Process.ImageGCGrace = -1
	if g, _ := newImageGC(off, roots{}, log); g != nil {
		t.Fatal("grace never: a collector")
	}
	if g, _ := newImageGC(cfg, struct{}{}, log); g != nil {
		t.Fatal("a backend without image roots: a collector")
	}
	g, err := newImageGC(cfg, roots{err: errors.New("unreadable state")}, log)
	if err != nil || g == nil {
		t.Fatalf("collector %v (%v)", g, err)
	}
	if err := g.Pass(t.Context()); err == nil || !strings.Contains(err.Error(), "nothing collected") {
		t.Fatalf("pass with unknown live roots: %v", err)
	}
	for _, c := range []string{"a", "b", "c"} {
		if _, err := os.Stat(entry(c)); err != nil {
			t.Fatalf("entry %s collected although live roots were unknown", c)
		}
	}
	g.backend = roots{live: []string{entry("b")}}
	if err := g.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]bool{"a": true, "b": true, "c": false} {
		if _, err := os.Stat(entry(c)); (err == nil) != want {
			t.Errorf("entry %s exists %v, want %v", c, err == nil, want)
		}
	}
}
