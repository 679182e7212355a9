package process

import (
	"context"

	"github.com/sandgate/sandgate/internal/proctree"
)

// readProc reads /proc/<pid>/stat. found is false when no such process exists.
func readProc(_ context.Context, pid int) (proc, bool, error) { return proctree.Read(pid) }

// allProcs lists every process on the host; entries that vanish mid-scan
// are skipped.
func allProcs(_ context.Context) ([]proc, error) { return proctree.All() }
