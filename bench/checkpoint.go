package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandgate/sandgate/internal/checkpoint"
)

func init() { register("checkpoint", checkpointSuite) }

const (
	figCheckpointReflinkP50 = "checkpoint.reflink.p50_ms"
	figCheckpointCopyP50    = "checkpoint.copy.p50_ms"
	goalCheckpointMS        = 200.0 // issue 23: checkpoint of 100 MB / 1,000 files where copy-on-write exists
	ckFiles, ckFileSize     = 1000, 100 << 10
)

// checkpointSuite times checkpoint, restore and fork of a 100 MB, 1,000-file
// workspace with the engine the gateway runs (internal/checkpoint), on
// this machine's filesystem (copy: ext4 has no reflink) and, when the bench
// runs as root with mkfs.xfs, on an XFS image mounted beside it (reflink).
func checkpointSuite(ctx context.Context) (Result, error) {
	tmp, err := os.MkdirTemp("", "sandgate-bench-checkpoint-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	res := Result{Title: "Checkpoints: 100 MB / 1,000-file workspace", Columns: statsColumns, Figures: map[string]float64{}}
	dirs := map[string]string{"": filepath.Join(tmp, "disk")}
	xfs, unmount, why := mountXFS(ctx, tmp)
	if unmount != nil {
		defer unmount()
		dirs["xfs"] = xfs
	} else {
		res.Notes = append(res.Notes, "reflink not measured: "+why)
	}
	for _, where := range []string{"", "xfs"} {
		dir, ok := dirs[where]
		if !ok {
			continue
		}
		rows, method, create, err := checkpointOn(ctx, dir)
		if err != nil {
			return Result{}, fmt.Errorf("checkpoint on %s: %w", dir, err)
		}
		res.Rows = append(res.Rows, rows...)
		switch method {
		case checkpoint.MethodReflink:
			res.Figures[figCheckpointReflinkP50] = msF(create.P50)
		case checkpoint.MethodCopy:
			res.Figures[figCheckpointCopyP50] = msF(create.P50)
		}
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d runs each. Each run writes a fresh workspace of %d files of %d KiB (random bytes) in 20 directories, flushes it "+
			"(sync), then times: a first checkpoint (nothing to share); a second one after 10 files changed (the other 990 are "+
			"hard-linked to the first's copies); a restore of the first into the changed workspace (staging and the swap; the swap is "+
			"the part the sandbox is frozen for); a fork of the workspace into a new thread's (CopyTree).", opts.CheckpointRuns, ckFiles, ckFileSize>>10),
		"Through the gateway a checkpoint adds the sandbox's freeze and thaw around the copy (see the freeze suite) and the HTTP request.",
		fmt.Sprintf("The goal (checkpoint < %g ms where copy-on-write exists) is in the Goals table.", goalCheckpointMS))
	return res, nil
}

// checkpointOn measures on the filesystem of dir.
func checkpointOn(ctx context.Context, dir string) ([][]string, checkpoint.Method, Stats, error) {
	// The budget is checked as through the gateway, but never met: the
	// suite's small file systems hold two 100 MB workspaces and their
	// checkpoints, past a quarter of them (the default).
	t, err := checkpoint.NewThreads(dir, checkpoint.Config{Keep: -1, MaxAge: -1, UserBytes: 1 << 50})
	if err != nil {
		return nil, "", Stats{}, err
	}
	method := t.Method()
	none := func(fn func() error) error { return fn() }
	var first, second, restore, fork []time.Duration
	for i := range opts.CheckpointRuns {
		thread := fmt.Sprintf("t%d", i)
		ws := t.Workspace("bench", thread)
		if err := writeWorkspace(ws); err != nil {
			return nil, "", Stats{}, err
		}
		_ = exec.CommandContext(ctx, "sync").Run()
		t0 := time.Now()
		ck, err := t.Create(ctx, "bench", thread, "", none)
		if err != nil {
			return nil, "", Stats{}, err
		}
		first = append(first, time.Since(t0))
		for j := range 10 {
			if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("d%02d", j), "f0000"), []byte("changed"), 0o644); err != nil {
				return nil, "", Stats{}, err
			}
		}
		t0 = time.Now()
		if _, err := t.Create(ctx, "bench", thread, "", none); err != nil {
			return nil, "", Stats{}, err
		}
		second = append(second, time.Since(t0))
		t0 = time.Now()
		if err := t.Restore(ctx, "bench", thread, ck.ID, none); err != nil {
			return nil, "", Stats{}, err
		}
		restore = append(restore, time.Since(t0))
		t0 = time.Now()
		if err := t.Fork(ctx, "bench", thread, thread+"-fork", "", none, none); err != nil {
			return nil, "", Stats{}, err
		}
		fork = append(fork, time.Since(t0))
		for _, d := range []string{filepath.Join(dir, "users"), filepath.Join(dir, "checkpoints")} {
			if err := os.RemoveAll(d); err != nil {
				return nil, "", Stats{}, err
			}
		}
	}
	c := summarize(first)
	label := fmt.Sprintf("%s (%s)", method, filepath.Base(dir))
	return [][]string{
		statsRow(label+": checkpoint, first", c),
		statsRow(label+": checkpoint after 10 files changed", summarize(second)),
		statsRow(label+": restore", summarize(restore)),
		statsRow(label+": fork (copy of the workspace)", summarize(fork)),
	}, method, c, nil
}

// writeWorkspace writes ckFiles files of random bytes under ws, dated an
// hour back: files written in the same instant as a checkpoint are copied
// again by the next one (their mtime cannot tell a same-size rewrite), and
// a workspace is older than that in use.
func writeWorkspace(ws string) error {
	buf := make([]byte, ckFileSize)
	old := time.Now().Add(-time.Hour)
	for i := range ckFiles {
		d := filepath.Join(ws, fmt.Sprintf("d%02d", i%20))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		_, _ = rand.Read(buf)
		f := filepath.Join(d, fmt.Sprintf("f%04d", i/20))
		if err := os.WriteFile(f, buf, 0o644); err != nil {
			return err
		}
		if err := os.Chtimes(f, old, old); err != nil {
			return err
		}
	}
	return nil
}

// mountXFS makes and loop-mounts a 1 GiB XFS image with reflink under tmp;
// unmount is nil (and why says why) when this machine cannot.
func mountXFS(ctx context.Context, tmp string) (dir string, unmount func(), why string) {
	if os.Geteuid() != 0 {
		return "", nil, "the bench does not run as root (a loop mount needs it)"
	}
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		return "", nil, "mkfs.xfs is not installed (xfsprogs)"
	}
	img, dir := filepath.Join(tmp, "xfs.img"), filepath.Join(tmp, "xfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err.Error()
	}
	for _, args := range [][]string{{"truncate", "-s", "1G", img}, {"mkfs.xfs", "-q", "-m", "reflink=1", img}, {"mount", "-o", "loop", img, dir}} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", nil, fmt.Sprintf("%s: %v: %s", args[0], err, out)
		}
	}
	return dir, func() { _ = exec.Command("umount", dir).Run() }, ""
}
