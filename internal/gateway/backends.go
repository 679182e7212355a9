package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/config"
)

// newBackend builds the configured backend and returns it with its name.
func newBackend(_ context.Context, cfg config.Config, log *slog.Logger) (backend.Backend, string, error) {
	name := cfg.Backend
	if name == "auto" {
		name = "process"
		log.Info("backend auto: using process (no container runtime backend built in yet)")
	}
	switch name {
	case "process":
		be, err := process.New(process.Config{
			Binary:   cfg.Process.Binary,
			StateDir: filepath.Join(cfg.DataDir, "sandboxes", "process"),
			Instance: cfg.Pool.Instance,
		}, log)
		if err != nil {
			return nil, "", fmt.Errorf("process backend: %w", err)
		}
		return be, name, nil
	default:
		return nil, "", fmt.Errorf("backend: %q is not available in this build yet", name)
	}
}
