package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// Fault kinds of the fleet; the Redis adds its own (stateRedis.faults).
const (
	faultReplica = "replica kill -9 + restart"
	faultSandbox = "sandbox process kill -9"
)

// faultCycle is the fault kinds, injected in this order, round and round.
func (c *cluster) faultCycle() []string {
	return append([]string{faultReplica, faultSandbox}, c.redis.faults()...)
}

// fault is one injection.
type fault struct {
	kind     string
	at       time.Time // injected
	repaired time.Time // the broken part is back (replica healthy, Redis accepting); = at when instant
	target   string
	thread   string // sandbox kill: the thread whose sandbox died
	inc      string // sandbox kill: its incarnation
	err      error  // the injection or repair failed
}

type injector struct {
	c      *cluster
	cfg    config
	logf   func(string, ...any)
	rng    *rand.Rand
	faults []fault
}

// run injects one fault every FaultEvery until ctx ends. Each fault is
// repaired before the next, and before run returns, whatever ctx says.
func (in *injector) run(ctx context.Context) {
	in.rng = rand.New(rand.NewPCG(7, 11))
	cycle := in.c.faultCycle()
	for i := 0; ; i++ {
		if !sleep(ctx, in.cfg.FaultEvery) {
			return
		}
		f := in.inject(cycle[i%len(cycle)])
		in.faults = append(in.faults, f)
		if f.err != nil {
			in.logf("fault %s (%s): %v", f.kind, f.target, f.err)
			continue
		}
		in.logf("fault %-28s %-28s repaired after %s", f.kind, f.target, f.repaired.Sub(f.at).Round(time.Millisecond))
	}
}

func (in *injector) inject(kind string) fault {
	// Repairs must finish even when the run's deadline passes mid-fault;
	// a Cluster heal is bounded by its own clusterHealBound.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := fault{kind: kind, at: time.Now()}
	switch kind {
	case faultReplica:
		r := in.c.replicas[in.rng.IntN(len(in.c.replicas))]
		f.target = fmt.Sprintf("replica %d", r.idx)
		r.kill()
		time.Sleep(in.cfg.ReplicaDown)
		f.err = r.start(ctx)
	case faultSandbox:
		procs, err := scanSandboxes(in.c.bin, in.c.dataDir)
		if err != nil || len(procs) == 0 {
			f.target, f.err = "none", fmt.Errorf("no sandbox process to kill (%v)", err)
			break
		}
		p := procs[in.rng.IntN(len(procs))]
		f.target, f.thread, f.inc = fmt.Sprintf("%s pid %d", p.thread, p.pid), p.thread, p.incarnation()
		f.at = time.Now()
		// The whole group, as a crash or the OOM killer would leave it.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	default:
		var instant bool
		f.target, instant, f.err = in.c.redis.inject(ctx, kind, in.rng)
		if instant {
			f.repaired = f.at
			return f
		}
	}
	f.repaired = time.Now()
	if kind == faultSandbox {
		f.repaired = f.at
	}
	return f
}

// progress prints a line every 10 s until ctx ends and returns the highest
// load average it printed.
func progress(ctx context.Context, cs *clientSet, smp *sampler, logf func(string, ...any)) (maxLoad float64) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	began := time.Now()
	for {
		select {
		case <-ctx.Done():
			return maxLoad
		case <-t.C:
		}
		samples, live, dups := smp.snapshot()
		load := loadAverage()
		maxLoad = max(maxLoad, load)
		logf("%4.0fs  requests %d (failed %d)  live sandboxes %d  samples %d  duplicates %d  load %.1f",
			time.Since(began).Seconds(), cs.done.Load(), cs.fail.Load(), live, samples, dups, load)
	}
}
