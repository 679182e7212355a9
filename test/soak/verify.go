package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/statedb"
)

// checks is what the end of the run found.
type checks struct {
	duplicates []duplicate // during the run and at the end
	// Lost sandboxes, by how they were lost:
	vanished   []*seenProc // a sandbox that had served died with no destroy or kill to explain it
	untracked  []string    // a live sandbox process no state file names: invisible to the fleet
	unrecorded []string    // a live sandbox with no Redis record after the reconcile grace
	lostFiles  []string    // an acknowledged write not on disk
	mismatches []string    // a read-back right after an acknowledged write differed
	// Not losses, reported:
	staleRecords  int // record names another incarnation than the live one (healed by the next request)
	finalOK       int // threads answering an exec at the end
	finalRetried  int // of those, needing more than one try
	finalFailures []string
	filesChecked  int
	apiReads      int
}

func (k *checks) lost() int {
	return len(k.vanished) + len(k.untracked) + len(k.unrecorded) + len(k.lostFiles) + len(k.mismatches)
}

// verify runs the end-of-run checks on the settled fleet (no load, every
// part up, reconcilers past their grace).
func verify(ctx context.Context, c *cluster, o *outcome, logf func(string, ...any)) error {
	k := &o.checks
	k.mismatches = o.mismatches
	k.duplicates = append(k.duplicates, o.sampler.duplicates...)
	k.vanished = vanishedSandboxes(o)

	procs, err := scanSandboxes(c.bin, c.dataDir)
	if err != nil {
		return err
	}
	byThread := map[string][]sandboxProc{}
	for _, p := range procs {
		byThread[p.thread] = append(byThread[p.thread], p)
	}
	for thread, ps := range byThread {
		if d, ok := confirmDuplicate(c.bin, c.dataDir, thread, ps, time.Now()); ok && !slices.ContainsFunc(k.duplicates, func(x duplicate) bool { return x.key() == d.key() }) {
			k.duplicates = append(k.duplicates, d)
		}
	}

	// Every live process must be one the fleet knows (a state file names
	// it), and every sandbox the fleet knows must have its Redis record.
	pb, err := process.New(process.Config{Binary: c.bin, StateDir: c.stateDir()}, discardLogger())
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	infos, err := pb.List(lctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, in := range infos {
		known[in.Incarnation] = true
	}
	for _, p := range procs {
		if !known[p.incarnation()] {
			k.untracked = append(k.untracked, fmt.Sprintf("thread %s pid %d", p.thread, p.pid))
		}
	}
	rdb := c.redis.client()
	defer rdb.Close()
	keys := statedb.NewKeys("", 0)
	for _, in := range infos {
		rec, err := rdb.HGetAll(lctx, keys.Sandbox(in.SandboxID)).Result()
		switch {
		case err != nil:
			return fmt.Errorf("read record of %s: %w", in.SandboxID, err)
		case len(rec) == 0:
			k.unrecorded = append(k.unrecorded, fmt.Sprintf("thread %s sandbox %s (%s)", in.Thread, in.SandboxID, in.Incarnation))
		case rec["incarnation"] != in.Incarnation:
			k.staleRecords++
		}
	}

	checkFiles(c, o, k)
	finalRound(ctx, c, o.cfg, k)
	logf("verified: %d live sandboxes, %d files, %d/%d threads answer", len(procs), k.filesChecked, k.finalOK, o.cfg.Threads)
	return nil
}

// vanishedSandboxes are sandboxes that served a request and then died with
// neither a client destroy of their thread nor an injected kill around the
// time they went. Pids wrap quickly here (every exec forks a shell), so an
// answer counts for the incarnation that went first after it.
func vanishedSandboxes(o *outcome) []*seenProc {
	answers := map[int][]time.Time{} // pid -> ends of successful execs
	for _, r := range o.results {
		if r.op == opExec && r.ok {
			answers[r.pid] = append(answers[r.pid], r.end)
		}
	}
	gone := slices.Clone(o.sampler.gone)
	slices.SortFunc(gone, func(a, b *seenProc) int { return a.goneBy.Compare(b.goneBy) })
	prevGone := map[int]time.Time{}
	var out []*seenProc
	for _, g := range gone {
		pid, after := g.proc.pid, prevGone[g.proc.pid]
		prevGone[pid] = g.goneBy
		served := slices.ContainsFunc(answers[pid], func(t time.Time) bool { return t.After(after) && !t.After(g.goneBy) })
		if served && !explained(o, g) {
			out = append(out, g)
		}
	}
	return out
}

// explained: an injected kill of that incarnation, or a client destroy of
// its thread in flight around its disappearance (a destroy interrupted by a
// replica kill is finished later by the next acquire or the reconciler, so
// a failed one explains a disappearance up to 30 s on).
func explained(o *outcome, g *seenProc) bool {
	for _, f := range o.faults {
		if f.kind == faultSandbox && f.inc == g.proc.incarnation() {
			return true
		}
	}
	const slack = time.Second
	for _, r := range append(slices.Clone(o.results), o.cutShort...) {
		if r.op != opDestroy || threadName(r.thread) != g.proc.thread || r.start.After(g.goneBy) {
			continue
		}
		if !r.end.Before(g.lastSeen.Add(-slack)) || (!r.ok && g.goneBy.Sub(r.start) < 30*time.Second) {
			return true
		}
	}
	return false
}

// checkFiles reads every client's file in every thread from the host and,
// for one file per thread, through a gateway.
func checkFiles(c *cluster, o *outcome, k *checks) {
	apiDone := map[int]bool{}
	keys := make([]fileKey, 0, len(o.files))
	for key := range o.files {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b fileKey) int { return (a.thread*1e6 + a.client) - (b.thread*1e6 + b.client) })
	for _, key := range keys {
		f := o.files[key]
		name := fmt.Sprintf("soak/c%03d.txt", key.client)
		b, err := os.ReadFile(filepath.Join(c.threadDir(threadName(key.thread)), "workspace", name))
		got := string(b)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			k.lostFiles = append(k.lostFiles, fmt.Sprintf("%s/%s: %v", threadName(key.thread), name, err))
			continue
		}
		k.filesChecked++
		if !acceptable(f, got, err == nil) {
			k.lostFiles = append(k.lostFiles, fmt.Sprintf("%s/%s: %q on disk, last acknowledged %q", threadName(key.thread), name, got, f.acked))
			continue
		}
		if err != nil || apiDone[key.thread] {
			continue
		}
		apiDone[key.thread] = true
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		code, body, err := c.do(ctx, key.thread%len(c.replicas), "POST", "/threads/"+threadName(key.thread)+"/v1/file/read",
			map[string]any{"file": "/mnt/user-data/workspace/" + name})
		cancel()
		k.apiReads++
		if viaAPI, _ := dataField(body, "content"); err != nil || code != 200 || viaAPI != got {
			k.lostFiles = append(k.lostFiles, fmt.Sprintf("%s/%s through the gateway: %d %v %.80s", threadName(key.thread), name, code, err, body))
		}
	}
}

// acceptable: the file holds the last acknowledged write or one sent after
// it whose outcome was unknown; or, never acknowledged, it may be absent.
func acceptable(f *fileState, got string, exists bool) bool {
	if !exists {
		return f.acked == ""
	}
	return got == f.acked || slices.Contains(f.uncertain, got)
}

// The final round's bounds: a gateway that answered no request would
// otherwise hold it for hours (5 tries of requestTimeout per thread); a
// thread it has no time left for counts as not answering.
const (
	finalTryTimeout = 15 * time.Second
	finalBudget     = 3 * time.Minute
)

// finalRound runs one exec in every thread through the replicas in turn;
// a 503 (provisioning, a lock of a killed replica still held) is retried.
func finalRound(ctx context.Context, c *cluster, cfg config, k *checks) {
	ctx, cancel := context.WithTimeout(ctx, finalBudget)
	defer cancel()
	for th := range cfg.Threads {
		if ctx.Err() != nil {
			k.finalFailures = append(k.finalFailures, fmt.Sprintf("%s: not tried, the final round's %s ran out", threadName(th), finalBudget))
			continue
		}
		var last string
		for try := range 5 {
			tctx, cancelTry := context.WithTimeout(ctx, finalTryTimeout)
			code, body, err := c.do(tctx, th%len(c.replicas), "POST", "/threads/"+threadName(th)+"/v1/shell/exec", map[string]any{"command": "echo final"})
			cancelTry()
			out, _ := dataField(body, "output")
			if err == nil && code == 200 && strings.TrimSpace(out) == "final" {
				k.finalOK++
				if try > 0 {
					k.finalRetried++
				}
				last = ""
				break
			}
			last = fmt.Sprintf("%s: %d %v %.100s", threadName(th), code, err, body)
			if !sleep(ctx, 2*time.Second) {
				break
			}
		}
		if last != "" {
			k.finalFailures = append(k.finalFailures, last)
		}
	}
}
