package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

var (
	_ backend.LogStreamer = (*Process)(nil)
	_ backend.Statter     = (*Process)(nil)
	_ backend.Pruner      = (*Process)(nil)
)

// followPoll is how often a followed log is checked for new lines.
const followPoll = 200 * time.Millisecond

// Logs opens the sandbox server's log ({StateDir}/{sid}.log: its stdout and
// stderr). Following ends when ctx ends or the incarnation stops.
func (p *Process) Logs(ctx context.Context, info backend.Info, opts backend.LogOptions) (io.ReadCloser, error) {
	if err := backend.ValidSandboxID(info.SandboxID); err != nil {
		return nil, err
	}
	f, err := os.Open(p.logPath(info.SandboxID))
	if errors.Is(err, fs.ErrNotExist) {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if err != nil {
		return nil, fmt.Errorf("open sandbox log: %w", err)
	}
	if opts.Tail > 0 {
		if err := seekTail(f, opts.Tail); err != nil {
			f.Close()
			return nil, err
		}
	}
	if !opts.Follow {
		return f, nil
	}
	return &follower{f: f, ctx: ctx, alive: func() bool {
		ok, err := p.Alive(ctx, info)
		return err == nil && ok
	}}, nil
}

// seekTail positions f at the start of its last n lines. Logs are rotated
// at maxLogSize, so reading the file whole is bounded.
func seekTail(f *os.File, n int) error {
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read sandbox log: %w", err)
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	off := 0
	for i := 0; i < n; i++ {
		j := bytes.LastIndexByte(data[:end], '\n')
		if j < 0 {
			off = 0
			break
		}
		off, end = j+1, j
	}
	if _, err := f.Seek(int64(off), io.SeekStart); err != nil {
		return fmt.Errorf("seek sandbox log: %w", err)
	}
	return nil
}

// follower reads a growing file until ctx ends or the writer is gone.
type follower struct {
	f     *os.File
	ctx   context.Context
	alive func() bool
}

func (r *follower) Read(b []byte) (int, error) {
	for {
		n, err := r.f.Read(b)
		if n > 0 || !errors.Is(err, io.EOF) {
			return n, err
		}
		if !r.alive() {
			// One last read: lines written just before the exit.
			if n, err = r.f.Read(b); n > 0 {
				return n, nil
			}
			return 0, io.EOF
		}
		select {
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-time.After(followPoll):
		}
	}
}

func (r *follower) Close() error { return r.f.Close() }

// Stats sums the CPU time and resident memory of the sandbox's process tree.
func (p *Process) Stats(ctx context.Context, info backend.Info) (backend.Stats, error) {
	pid, start, err := parseIncarnation(info.Incarnation)
	if err != nil {
		return backend.Stats{}, err
	}
	if ok, err := live(ctx, pid, start); err != nil || !ok {
		return backend.Stats{}, errors.Join(err, fmt.Errorf("sandbox %s is not running", info.SandboxID))
	}
	tree, err := descendants(ctx, pid)
	if err != nil {
		return backend.Stats{}, err
	}
	st := backend.Stats{At: time.Now().UTC()}
	for _, pr := range append(tree, proc{PID: pid}) {
		cpu, rss, err := usageOf(pr.PID)
		if err != nil {
			if errors.Is(err, backend.ErrNotSupported) {
				return backend.Stats{}, err
			}
			continue // exited meanwhile
		}
		st.CPUSeconds += cpu
		st.MemoryBytes += rss
		st.PIDs++
	}
	return st, nil
}

// Leftovers are the logs of sandboxes that no longer run (a crashed
// sandbox keeps its log for the post-mortem). The state dir is this
// gateway's own, so everything in it is this fleet's.
func (p *Process) Leftovers(ctx context.Context, _ string) ([]backend.Leftover, error) {
	entries, err := os.ReadDir(p.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("list sandbox logs: %w", err)
	}
	var out []backend.Leftover
	for _, e := range entries {
		sid, ok := strings.CutSuffix(strings.TrimSuffix(e.Name(), ".1"), ".log")
		if !ok || backend.ValidSandboxID(sid) != nil {
			continue
		}
		st, err := p.liveState(ctx, sid)
		if err != nil || st != nil {
			continue // running, or cannot tell: kept
		}
		out = append(out, backend.Leftover{Kind: "log", Name: e.Name(), SandboxID: sid})
	}
	return out, nil
}

// RemoveLeftover deletes one log found by Leftovers, unless its sandbox
// has been created again since.
func (p *Process) RemoveLeftover(ctx context.Context, l backend.Leftover) error {
	if l.Kind != "log" || backend.ValidSandboxID(l.SandboxID) != nil ||
		(l.Name != l.SandboxID+".log" && l.Name != l.SandboxID+".log.1") {
		return fmt.Errorf("remove leftover %s %q: not a sandbox log", l.Kind, l.Name)
	}
	lk, err := p.lock(ctx, l.SandboxID)
	if err != nil {
		return err
	}
	if st, err := p.readState(l.SandboxID); err != nil || st != nil {
		lk.unlock(false)
		return errors.Join(err, fmt.Errorf("sandbox %s has a state again; its log is kept", l.SandboxID))
	}
	err = os.Remove(p.logPath(l.SandboxID) + strings.TrimPrefix(l.Name, l.SandboxID+".log"))
	lk.unlock(true) // no state: the id's lock file goes too
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove sandbox log: %w", err)
	}
	return nil
}
