package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// virtualUserData is the thread's data, which outlives the sandbox.
const virtualUserData = "/mnt/user-data"

// sweepBound stops a start-up sweep of a huge tree.
const sweepBound = 2 * time.Minute

// clockSlack is how far a file's timestamp may lag time.Now: the kernel
// stamps files from its coarse clock (a tick, 1 to 10 ms). A temp file a
// write makes just after the start can carry a time a little before it,
// so the sweep takes only files older than the start by more than this.
const clockSlack = 50 * time.Millisecond

// sweepTemps removes, in the background, the temporary files of writes and
// uploads that a destroy or crash cut off (createTemp's names) from the
// thread's data, which outlives every sandbox: without it each cut-off
// upload would keep its bytes on the host forever. Only files older than
// the server's start (by clockSlack) are taken, so a write that starts
// meanwhile keeps its own. Symlinks are not followed.
func (s *Server) sweepTemps(ctx context.Context, log *slog.Logger) {
	root, ro, err := s.pm.ToHost(virtualUserData)
	if err != nil || ro {
		return
	}
	started := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(ctx, sweepBound)
		defer cancel()
		n, err := sweepDir(ctx, root, started.Add(-clockSlack))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			log.Warn("sweep cut-off temporary files", "removed", n, "err", err)
		case n > 0:
			log.Info("removed cut-off temporary files", "removed", n)
		}
	}()
}

// sweepDir removes the regular files below root named like createTemp's
// that were last modified before cutoff, and returns how many.
func sweepDir(ctx context.Context, root string, cutoff time.Time) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable: leave it
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() || !isTempName(d.Name()) {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().Before(cutoff) && os.Remove(p) == nil {
			n++
		}
		return nil
	})
	return n, err
}

// isTempName: ".{name}.sandgate-tmp-{12 hex}", as createTemp makes them.
func isTempName(name string) bool {
	i := strings.LastIndex(name, tmpInfix)
	if !strings.HasPrefix(name, ".") || i < 1 {
		return false
	}
	suffix := name[i+len(tmpInfix):]
	if len(suffix) != 12 {
		return false
	}
	for _, r := range suffix {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}
