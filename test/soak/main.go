// Command soak holds many concurrent clients against three gateway replicas
// (process backend, one shared data dir, one real redis-server) while a fault
// injector kills replicas, kills sandboxes, restarts Redis empty and flushes
// it (or, with -redis cluster, fails over, pauses and reshards a Redis
// Cluster and kills its replicas); then it checks that no sandbox was lost
// or duplicated. Loopback only, bounded in time; it exits 1 on a lost or
// duplicated sandbox.
//
//	go run ./test/soak                                # 5 minutes, 200 clients
//	go run ./test/soak -short                         # ~30 s, 40 clients (CI)
//	go run ./test/soak -report docs/RELIABILITY.md    # full soak, then write the report
//	go run ./test/soak -redis cluster -report docs/RELIABILITY.md  # the same on a Redis Cluster, with its faults
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// config sizes one soak run.
type config struct {
	Duration   time.Duration // load phase, faults included
	Clients    int           // concurrent clients
	Threads    int           // fixed thread set the clients share
	Replicas   int           // gateway replicas
	ThinkMin   time.Duration // pause between one client's operations
	ThinkMax   time.Duration
	FaultEvery time.Duration // one fault per period, kinds in turn
	// How long a killed replica / a stopped Redis stays down.
	ReplicaDown, RedisDown time.Duration
	// The gateways' reconciler: it must restore records after Redis loses them.
	ReconcileInterval, ReconcileGrace time.Duration
	// BucketLeaseTTL: a killed replica's buckets (their reconciling) pass to
	// another replica only once its lease runs out.
	BucketLeaseTTL time.Duration
	SampleEvery    time.Duration // /proc sampling for duplicates
	Report         string        // write the reliability report here
	Tests          bool          // with Report: run the mapped tests for their results
	Keep           bool          // keep the work dir (logs, data) for a post-mortem; a failed run always does
	Redis          string        // redisSingle or redisCluster
	Short          bool
}

func defaultConfig(short bool) config {
	c := config{
		Duration: 5 * time.Minute, Clients: 200, Threads: 100, Replicas: 3,
		ThinkMin: 500 * time.Millisecond, ThinkMax: 1500 * time.Millisecond,
		FaultEvery: 15 * time.Second, ReplicaDown: time.Second, RedisDown: 3 * time.Second,
		ReconcileInterval: 2 * time.Second, ReconcileGrace: 5 * time.Second, BucketLeaseTTL: 3 * time.Second,
		SampleEvery: 200 * time.Millisecond, Tests: true, Redis: redisSingle,
	}
	if short {
		c.Short = true
		c.Duration, c.Clients, c.Threads = 30*time.Second, 40, 20
		c.FaultEvery, c.RedisDown = 5*time.Second, 2*time.Second
	}
	return c
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "CI size: ~30 s, 40 clients, 20 threads, a fault every 5 s")
	d := defaultConfig(false)
	duration := fs.Duration("duration", 0, "load phase (default 5m, or 30s with -short)")
	clients := fs.Int("clients", 0, "concurrent clients (default 200, or 40 with -short)")
	threads := fs.Int("threads", 0, "threads the clients share (default 100, or 20 with -short)")
	every := fs.Duration("fault-every", 0, "one fault per period (default 15s, or 5s with -short)")
	report := fs.String("report", "", "write the reliability report (markdown) to this file")
	tests := fs.Bool("tests", d.Tests, "with -report: run the tests named in the report and record their results")
	keep := fs.Bool("keep", false, "keep the work dir (gateway logs, data dir)")
	rds := fs.String("redis", redisSingle, "the state store: single (one redis-server) or cluster (3 masters + 3 replicas, with Cluster faults)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := defaultConfig(*short)
	for _, o := range []struct {
		dst *time.Duration
		v   time.Duration
	}{{&c.Duration, *duration}, {&c.FaultEvery, *every}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	for _, o := range []struct{ dst, v *int }{{&c.Clients, clients}, {&c.Threads, threads}} {
		if *o.v > 0 {
			*o.dst = *o.v
		}
	}
	c.Report, c.Tests, c.Keep, c.Redis = *report, *tests, *keep, *rds
	if c.Redis != redisSingle && c.Redis != redisCluster {
		return config{}, fmt.Errorf("-redis %q: single or cluster", c.Redis)
	}
	if c.Duration > 30*time.Minute {
		return config{}, errors.New("-duration is bounded to 30m")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	out, err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !out.passed() {
		fmt.Fprintln(os.Stderr, "soak: FAILED:", out.verdict())
		os.Exit(1)
	}
}

// run is one soak: start the fleet, probe bad inputs, hold the load while
// faults are injected, settle, verify, and write the report if asked.
func run(ctx context.Context, cfg config, out io.Writer) (*outcome, error) {
	out = &lockedWriter{w: out} // progress and the injector log at once
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "soak: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	began := time.Now()
	c, err := newCluster(ctx, cfg, logf)
	if err != nil {
		return nil, err
	}
	defer c.close()
	logf("fleet up in %s: %d replicas, redis %s, data dir %s", time.Since(began).Round(time.Millisecond), len(c.replicas), c.redis.addr(), c.dataDir)

	o := &outcome{cfg: cfg, started: time.Now(), cycle: c.faultCycle(), redis: c.redis.describe()}
	o.probes = runProbes(ctx, c, logf)

	smp := newSampler(c.bin, c.dataDir)
	sctx, stopSampler := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go func() { smp.run(sctx, cfg.SampleEvery); close(samplerDone) }()
	defer func() { stopSampler(); <-samplerDone }()

	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	clients := startClients(load, c, cfg)
	inj := &injector{c: c, cfg: cfg, logf: logf}
	faultCtx, stopFaults := context.WithTimeout(ctx, cfg.Duration)
	defer stopFaults()
	progressDone := make(chan struct{})
	o.load[0] = loadAverage()
	go func() { o.load[1] = progress(faultCtx, clients, smp, logf); close(progressDone) }()
	inj.run(faultCtx) // returns at the deadline with every fault repaired
	<-progressDone
	stopLoad()
	results := clients.wait()
	o.loadEnded = time.Now()
	o.load[2] = loadAverage()
	o.load[1] = max(o.load[0], o.load[1], o.load[2])
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	settle := cfg.settle()
	logf("load stopped after %s; settling %s", o.loadEnded.Sub(o.started).Round(time.Second), settle)
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	stopSampler()
	<-samplerDone
	o.faults, o.results, o.cutShort, o.files, o.mismatches, o.sampler = inj.faults, results, clients.cutDestroys(), clients.files(), clients.mismatches(), smp
	if err := verify(ctx, c, o, logf); err != nil {
		return nil, err
	}
	o.analyze()
	o.print(out)
	// A failed run keeps its gateway logs and data dir: what killed a
	// vanished sandbox is only in there.
	c.cfg.Keep = c.cfg.Keep || !o.passed()
	if cfg.Report != "" {
		if cfg.Tests {
			o.tests = runMappedTests(ctx, logf)
		}
		if err := writeReport(cfg.Report, o); err != nil {
			return nil, err
		}
		logf("wrote %s", cfg.Report)
	}
	return o, nil
}

// loadAverage is the 1-minute load average (0 where /proc has none).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(b), &l)
	return l
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// settle is how long the fleet rests before the end-of-run checks: a
// killed replica's buckets change hands (its lease runs out), then their
// reconciler sees every sandbox past its grace, twice. A create cut short
// by a kill between its sandbox and its record is adopted by then.
func (c config) settle() time.Duration {
	return c.BucketLeaseTTL + c.ReconcileGrace + 2*c.ReconcileInterval + time.Second
}
