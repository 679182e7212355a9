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
	"github.com/sandgate/sandgate/internal/jail"
)

var (
	_ backend.LogStreamer = (*Process)(nil)
	_ backend.Statter     = (*Process)(nil)
	_ backend.Pruner      = (*Process)(nil)
	_ backend.MeterOpener = (*Process)(nil)
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

// Stats reads the sandbox's cgroups (memory current, peak and limit,
// pids, and CPU: v2's cpu.stat, v1's cpuacct.usage) and sums its process
// tree's CPU time where the cgroup has none (v1 without a cpuacct
// hierarchy) and its resident memory where there is no cgroup at all
// (isolation none).
func (p *Process) Stats(ctx context.Context, info backend.Info) (backend.Stats, error) {
	pid, start, err := liveIncarnation(ctx, info)
	if err != nil {
		return backend.Stats{}, err
	}
	rid, ok, err := p.cgroupName(info)
	if err != nil {
		return backend.Stats{}, err
	}
	if ok {
		if st, inCgroup, err := p.cgroupStats(rid, pid, start); err != nil || inCgroup {
			return st, err
		}
	}
	cpu, rss, pids, err := treeUsage(pid, start)
	if err != nil {
		return backend.Stats{}, err
	}
	return backend.Stats{At: time.Now().UTC(), CPUSeconds: cpu, MemoryBytes: rss, PIDs: pids}, nil
}

// liveIncarnation is the leader of info's incarnation, an error unless it
// runs.
func liveIncarnation(ctx context.Context, info backend.Info) (pid int, start string, err error) {
	if pid, start, err = parseIncarnation(info.Incarnation); err != nil {
		return 0, "", err
	}
	if ok, err := live(ctx, pid, start); err != nil || !ok {
		return 0, "", errors.Join(err, fmt.Errorf("sandbox %s is not running", info.SandboxID))
	}
	return pid, start, nil
}

// cgroupName is the name of the cgroups of info's incarnation; ok is false
// when it has none (no cgroups, or its state is another incarnation's).
func (p *Process) cgroupName(info backend.Info) (rid string, ok bool, err error) {
	if p.cgroups == nil {
		return "", false, nil
	}
	st, err := p.readState(info.SandboxID)
	if err != nil || st == nil || st.Incarnation != info.Incarnation {
		return "", false, err
	}
	return st.rid(), true, nil
}

// cgroupStats reads the cgroups named rid, and the CPU time of the process
// tree of pid where they have none; ok is false when there are no such
// cgroups.
func (p *Process) cgroupStats(rid string, pid int, start string) (st backend.Stats, ok bool, err error) {
	u, ok, err := p.cgroups.Usage(rid)
	if err != nil || !ok {
		return backend.Stats{}, ok, err
	}
	st = statsOf(u)
	if !u.HasCPU {
		cpu, _, _, err := treeUsage(pid, start)
		if err != nil {
			return backend.Stats{}, true, err
		}
		st.CPUSeconds = cpu
	}
	return st, true, nil
}

func statsOf(u jail.Usage) backend.Stats {
	return backend.Stats{CPUSeconds: u.CPU.Seconds(), MemoryBytes: u.Memory, MemoryPeakBytes: u.MemoryPeak,
		MemoryLimitBytes: u.MemoryLimit, PIDs: u.PIDs, OOMKills: u.OOMKills, At: time.Now().UTC()}
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

// OpenMeter measures the sandbox for pool.Sampler. With cgroups it holds
// the sandbox's cgroup files open, so a sample is six preads (past the
// budget of held files, meterBudget, it opens them for each sample), and with a
// v1 sandbox that has no cpuacct cgroup (see jail.Cgroups.CPUFrom) the
// CPU times of the processes its cgroup.procs lists; with none a sample
// is Stats (a process-tree walk).
func (p *Process) OpenMeter(ctx context.Context, info backend.Info) (backend.Meter, error) {
	pid, start, err := liveIncarnation(ctx, info)
	if err != nil {
		return nil, err
	}
	rid, named, err := p.cgroupName(info)
	if err != nil {
		return nil, err
	}
	if named {
		if !p.meters.take() {
			// Its cgroup is named once: a sample reads no state file.
			return cgroupOpener{p: p, rid: rid, pid: pid, start: start}, nil
		}
		h, ok, err := p.cgroups.OpenUsage(rid)
		if err != nil || !ok {
			p.meters.give()
		}
		if err != nil {
			return nil, err
		}
		if ok {
			return &cgroupMeter{h: h, pid: pid, start: start, budget: &p.meters}, nil
		}
	}
	return statsMeter{p: p, info: info}, nil
}

// cgroupMeter reads open cgroup files; once the incarnation is gone its
// cgroup is removed and the reads fail, which ends the sampling.
type cgroupMeter struct {
	h *jail.UsageFiles
	// pid and start are the sandbox's leader, checked live before a v1
	// sandbox without cpuacct sums its processes' CPU.
	pid    int
	start  string
	procs  []int // reused: a sample allocates no list
	budget *meterBudget
}

func (m *cgroupMeter) Sample(ctx context.Context) (backend.Stats, error) {
	u, err := m.h.Read()
	if err != nil {
		return backend.Stats{}, err
	}
	st := statsOf(u)
	if !u.HasCPU {
		if ok, err := live(ctx, m.pid, m.start); err != nil || !ok {
			return backend.Stats{}, errors.Join(err, errors.New("sandbox is not running"))
		}
		// The cgroup's processes, not a walk of the host's: one read of
		// its open cgroup.procs, then each process's own stat.
		if m.procs, err = m.h.Procs(m.procs[:0]); err != nil {
			return backend.Stats{}, err
		}
		for _, pid := range m.procs {
			if c, err := cpuOf(pid); err == nil {
				st.CPUSeconds += c
			} // else exited meanwhile
		}
	}
	return st, nil
}

func (m *cgroupMeter) Close() {
	m.h.Close()
	m.budget.give()
}

// cgroupOpener is a meter past the budget: it opens its sandbox's cgroup
// files for each sample. Its incarnation's leader must still run after the
// read: a cold-created sandbox's cgroup is named after its sandbox id, so
// the thread's next incarnation has one of the same name, which must not
// be read as this one's. A failed sample ends the sampling, as a held
// meter's read of a removed cgroup does.
type cgroupOpener struct {
	p     *Process
	rid   string
	pid   int
	start string
}

func (m cgroupOpener) Sample(ctx context.Context) (backend.Stats, error) {
	st, ok, err := m.p.cgroupStats(m.rid, m.pid, m.start)
	if err != nil {
		return backend.Stats{}, err
	}
	if alive, err := live(ctx, m.pid, m.start); err != nil || !ok || !alive {
		return backend.Stats{}, errors.Join(err, errors.New("sandbox is not running"))
	}
	return st, nil
}

func (cgroupOpener) Close() {}

// OpensFiles: the sampler samples it less often (pool's filesOpener).
func (cgroupOpener) OpensFiles() bool { return true }

type statsMeter struct {
	p    *Process
	info backend.Info
}

func (m statsMeter) Sample(ctx context.Context) (backend.Stats, error) { return m.p.Stats(ctx, m.info) }
func (statsMeter) Close()                                              {}
func (statsMeter) OpensFiles() bool                                    { return true }
