//go:build !linux

package process

import "github.com/sandgate/sandgate/internal/backend"

// usageOf: only Linux's /proc is read; elsewhere top shows no figures.
func usageOf(int) (float64, int64, error) { return 0, 0, backend.ErrNotSupported }
