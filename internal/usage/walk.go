// Package usage measures the disk a thread's data takes on the gateway host
// ({data_dir}/users/{user}/threads/{thread}/user-data) and caches it per
// thread, so the control plane can report it and the data plane can refuse
// file writes over a quota with a map look-up, never a disk walk.
package usage

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"time"
)

// Usage is one measurement of a thread's data.
type Usage struct {
	// Bytes is the space allocated on disk (st_blocks*512 where the
	// platform has it), each hard-linked file counted once, symlinks not
	// followed.
	Bytes int64
	// Approximate is set when the walk stopped early (entry or time bound,
	// an unreadable directory): Bytes is then a lower bound.
	Approximate bool
	MeasuredAt  time.Time
}

// Over reports whether u is over quota (bytes; 0 = none).
func (u Usage) Over(quota int64) bool { return quota > 0 && u.Bytes > quota }

// Bounds stop a walk; zero fields take the defaults.
type Bounds struct {
	MaxEntries int           // default DefaultMaxEntries
	MaxTime    time.Duration // default DefaultMaxTime
}

// Defaults of Bounds: a thread's walk costs at most this much.
const (
	DefaultMaxEntries = 200_000
	DefaultMaxTime    = 5 * time.Second
)

func (b Bounds) withDefaults() Bounds {
	if b.MaxEntries <= 0 {
		b.MaxEntries = DefaultMaxEntries
	}
	if b.MaxTime <= 0 {
		b.MaxTime = DefaultMaxTime
	}
	return b
}

// errBound stops the walk at a bound.
var errBound = errors.New("walk bound reached")

// checkEvery is how many entries pass between clock and context checks.
const checkEvery = 256

// Measure walks dir and sums what it allocates. A missing dir is 0 bytes.
// It returns an error only when ctx ends (or dir cannot be read at all);
// a bound reached or an unreadable subtree gives an approximate Usage.
func Measure(ctx context.Context, dir string, b Bounds) (Usage, error) {
	b = b.withDefaults()
	start := time.Now()
	deadline := start.Add(b.MaxTime)
	var u Usage
	seen := map[fileID]struct{}{} // multiply-linked files already counted
	entries := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			u.Approximate = true // unreadable: skip it, say the sum is short
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		entries++
		if entries > b.MaxEntries {
			return errBound
		}
		if entries%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return errBound
			}
		}
		info, err := d.Info() // lstat: a symlink is counted as itself
		if err != nil {
			u.Approximate = true // removed while walking, or unreadable
			return nil
		}
		size, id, links := allocated(info)
		if links > 1 && !info.IsDir() {
			if _, dup := seen[id]; dup {
				return nil
			}
			seen[id] = struct{}{}
		}
		u.Bytes += size
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, errBound):
		u.Approximate = true
	case errors.Is(err, fs.ErrNotExist) && ctx.Err() == nil:
		u.Bytes = 0
	default:
		return Usage{}, err
	}
	u.MeasuredAt = start
	return u, nil
}

// fileID names a file across hard links.
type fileID struct{ dev, ino uint64 }
