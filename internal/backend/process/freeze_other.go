//go:build !linux

package process

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/internal/backend"
)

// signalFreezer: off Linux, Pause is not supported: stopping a process
// tree surely takes each thread's state, which stopTree reads in /proc.
const signalFreezer = "none"

func stopTree(context.Context, int, string) error {
	return fmt.Errorf("stop process tree: %w", backend.ErrNotSupported)
}

// contTree has nothing to continue: stopTree never stopped anything.
func contTree(context.Context, int, string) error { return nil }
