//go:build !linux

package process

import "github.com/sandgate/sandgate/internal/backend"

// treeUsage: only Linux's /proc is read; elsewhere top shows no figures.
func treeUsage(int, string) (float64, int64, int, error) { return 0, 0, 0, backend.ErrNotSupported }
func cpuOf(int) (float64, error)                         { return 0, backend.ErrNotSupported }
