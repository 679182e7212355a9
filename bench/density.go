package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/backend/process"
)

func init() { register("density", density) }

const (
	// densityCreators make each step's sandboxes at once; densitySweepers
	// send a sweep's requests.
	densityCreators = 4
	densitySweepers = 4
	// densityMemReserve is the host memory a step must leave available:
	// the machine is shared, and the kernel's OOM killer is not a limit to
	// name but a run that took others down.
	densityMemReserve = 3 << 30
	// densityMemMargin multiplies a step's projected memory.
	densityMemMargin = 1.5
	// densityPidShare is the share of kernel.pid_max (and threads-max) the
	// host's threads may reach: the rest is others' headroom.
	densityPidShare = 0.9
	// densityStopP99 ends the run: a sweep this slow is a limit met (the
	// goal is 50 ms).
	densityStopP99 = 500 * time.Millisecond
	densityGoalP99 = 50 * time.Millisecond
	// densityIdle is the quiet window in which the gateway's and the
	// sandboxes' background CPU is measured.
	densityIdle = 5 * time.Second
)

// densityStep is what one step measured, with n sandboxes live.
type densityStep struct {
	n                    int
	create               Stats // this step's creates (first GET of a new thread)
	sandboxes            procGroup
	gatewayRSS           int64
	gateway              memRollup
	gatewayFDs           int
	goroutines           int
	hostUsed             int64 // MemTotal - MemAvailable
	kernel               kernelMem
	tasks                int   // threads on the host
	keep, fresh          Stats // sweeps: kept-alive client, a new connection per request
	gatewayIdle, sbxIdle float64
	redis                int64
	load                 string
}

// densityRun is a run: its steps and the limit that ended it.
type densityRun struct {
	steps   []densityStep
	limit   string
	base    densityStep // nothing created yet
	took    time.Duration
	split   map[string]int64 // one sandbox's smaps by mapping kind
	splitN  map[string]int
	oneSbx  procGroup
	pidMax  int
	fdLimit int
	nsMax   int
}

// density starts isolated process sandboxes through one real gateway (real
// redis-server) in steps of opts.DensityStep until a limit is met or
// opts.DensityMax are live, measuring at each step memory per sandbox,
// the gateway's footprint and a sweep's latency over every live sandbox.
func density(ctx context.Context) (Result, error) {
	began := time.Now()
	env, err := startSuiteEnv(ctx, "density")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	rdb := redis.NewClient(&redis.Options{Addr: env.redisAddr})
	env.cleanup.push(func(context.Context) { rdb.Close() })
	if err := densityHostLimits(env); err != nil {
		return Result{}, err
	}
	dataDir, logPath := filepath.Join(env.tmp, "data"), filepath.Join(env.tmp, "gateway.log")
	// Every sandbox stays live for the run: no idle reaping within it (the
	// reaper still makes its passes), no create rate limit and no bound on
	// one user's threads with data (one user makes them all), no cap.
	gw, gaddr, err := startGatewayEnv(ctx, env.bin, env.redisAddr, dataDir, logPath, nil,
		"--idle-timeout", "6h", "--create-rate", "0", "--checkpoint-user-threads", "0")
	if err != nil {
		return Result{}, err
	}
	base := "http://" + gaddr
	var live []string
	var liveMu sync.Mutex
	env.cleanup.push(func(context.Context) {
		// Sandboxes outlive their gateway by design: destroy them through
		// it, then sweep what is left with the backend itself. The
		// cleanup's own minute is too short for thousands.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		liveMu.Lock()
		threads := slices.Clone(live)
		liveMu.Unlock()
		destroyParallel(ctx, base, threads)
		gw.stop(syscall.SIGTERM, 10*time.Second)
		if err := destroyAll(ctx, process.Config{Binary: env.bin, StateDir: filepath.Join(dataDir, "sandboxes", "process")}); err != nil {
			fmt.Fprintf(os.Stderr, "bench: density: sandboxes left running: %v\n", err)
		}
	})

	r := densityRun{pidMax: min(sysctlInt("kernel/pid_max"), sysctlInt("kernel/threads-max")), fdLimit: fdLimit(gw.pid())}
	r.nsMax = sysctlInt("user/max_user_namespaces")
	for _, f := range []string{"mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		r.nsMax = min(r.nsMax, sysctlInt("user/max_"+f+"_namespaces"))
	}
	if r.base, err = densityMeasure(ctx, gw.pid(), base, rdb, nil); err != nil {
		return Result{}, err
	}
	next := 0
	for {
		prev := r.base
		if len(r.steps) > 0 {
			prev = r.steps[len(r.steps)-1]
		}
		if r.limit = densityHeadroom(r, prev); r.limit != "" {
			break
		}
		step := min(opts.DensityStep, opts.DensityMax-prev.n)
		threads := make([]string, step)
		for i := range threads {
			threads[i] = "d" + strconv.Itoa(next+i)
		}
		next += step
		created, lat, err := densityCreate(ctx, base, threads)
		liveMu.Lock()
		live = append(live, created...)
		n := len(live)
		liveMu.Unlock()
		if ctx.Err() != nil {
			return Result{}, context.Cause(ctx)
		}
		if err != nil {
			r.limit = densityFailure("creating sandbox "+strconv.Itoa(n+1), err, prev, r, logPath)
			break
		}
		liveMu.Lock()
		sweep := slices.Clone(live)
		liveMu.Unlock()
		s, err := densityMeasure(ctx, gw.pid(), base, rdb, sweep)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, context.Cause(ctx)
			}
			r.limit = densityFailure(fmt.Sprintf("the sweep over %d sandboxes", n), err, prev, r, logPath)
			break
		}
		s.create = summarize(lat)
		r.steps = append(r.steps, s)
		fmt.Fprintf(os.Stderr, "bench: density: %d live: %.2f MiB PSS each, gateway %s PSS %d fds, sweep p99 %s / %s ms (kept / new conn), load %s\n",
			n, float64(s.sandboxes.mem.pss)/float64(n)/(1<<20), mib(s.gateway.pss), s.gatewayFDs, ms(s.keep.P99), ms(s.fresh.P99), s.load)
		if p99 := max(s.keep.P99, s.fresh.P99); p99 > densityStopP99 {
			r.limit = fmt.Sprintf("latency: the sweep's p99 reached %s ms at %d sandboxes (the run stops past %s ms)", ms(p99), n, ms(densityStopP99))
			break
		}
	}
	if len(r.steps) == 0 {
		return Result{}, fmt.Errorf("no step completed: %s", r.limit)
	}
	if err := densityHold(ctx, base, live); err != nil {
		return Result{}, err
	}
	r.split, r.splitN, r.oneSbx = oneSandbox(gw.pid())
	r.took = time.Since(began)
	return densityResult(r), nil
}

// densityHeadroom names the limit the next step would cross, measured on
// the last one; "" if it fits.
func densityHeadroom(r densityRun, last densityStep) string {
	n := last.n
	if n >= opts.DensityMax {
		return fmt.Sprintf("none met: the run's bound, -density-max %d", opts.DensityMax)
	}
	step := min(opts.DensityStep, opts.DensityMax-n)
	perSandbox := func(total, base float64) float64 { return (total - base) / float64(max(n, 1)) }
	avail := meminfo("MemAvailable")
	// Memory by the dearer of the average and the last step's own cost,
	// with half again as margin: a sandbox costs more as they multiply
	// (1.17 MiB PSS each at 500, 1.95 at 4,500 here), and a step sized by
	// the average took a 24 GiB machine into reclaim with 3 GiB
	// "available" left (load average 9,000; the kernel's page cache is
	// not all free when thousands of processes want it).
	mem := perSandbox(float64(last.hostUsed), float64(r.base.hostUsed))
	if m, ok := lastStepCost(r, func(s densityStep) int64 { return s.hostUsed }); ok {
		mem = max(mem, m)
	}
	mem *= densityMemMargin
	if n > 0 && float64(avail)-mem*float64(step) < densityMemReserve {
		return fmt.Sprintf("memory: %s available, %d more sandboxes at %s each would leave less than the %s reserve",
			mib(avail), step, mib(int64(mem)), mib(densityMemReserve))
	}
	if thr := perSandbox(float64(last.tasks), float64(r.base.tasks)); n > 0 && float64(hostTasks())+thr*float64(step) > densityPidShare*float64(r.pidMax) {
		return fmt.Sprintf("pids: %d threads on the host, %d more sandboxes at %.1f threads each would pass %.0f %% of kernel.pid_max/threads-max (%d)",
			hostTasks(), step, thr, 100*densityPidShare, r.pidMax)
	}
	// Descriptors by the last step's own cost once there is one: the
	// held meters' files stop at their budget, which the average spreads
	// over the first sandboxes only.
	fd := perSandbox(float64(last.gatewayFDs), float64(r.base.gatewayFDs))
	if f, ok := lastStepCost(r, func(s densityStep) int64 { return int64(s.gatewayFDs) }); ok {
		fd = f
	}
	if n > 0 && float64(last.gatewayFDs)+fd*float64(step) > 0.95*float64(r.fdLimit) {
		return fmt.Sprintf("gateway file descriptors: %d open, %.2f per sandbox, limit %d (RLIMIT_NOFILE)", last.gatewayFDs, fd, r.fdLimit)
	}
	if n+step > r.nsMax*9/10 {
		return fmt.Sprintf("namespaces: %d sandboxes would pass 90 %% of /proc/sys/user/max_*_namespaces (%d, one of each per sandbox)", n+step, r.nsMax)
	}
	return ""
}

// lastStepCost is what the last step added of v per sandbox it added;
// false before there are two steps.
func lastStepCost(r densityRun, v func(densityStep) int64) (float64, bool) {
	k := len(r.steps)
	if k < 2 {
		return 0, false
	}
	last, before := r.steps[k-1], r.steps[k-2]
	return float64(v(last)-v(before)) / float64(max(last.n-before.n, 1)), true
}

// densityFailure names the limit behind a failed create or sweep from the
// error, the gateway's log and the host's state.
func densityFailure(what string, err error, last densityStep, r densityRun, logPath string) string {
	log, _ := os.ReadFile(logPath)
	tail := string(log[max(0, len(log)-4000):])
	text := strings.ToLower(err.Error() + "\n" + tail)
	kind := "unclassified"
	switch {
	case strings.Contains(text, "too many open files"):
		kind = "file descriptors (EMFILE)"
	case strings.Contains(text, "resource temporarily unavailable") || strings.Contains(text, "eagain"):
		kind = fmt.Sprintf("pids or threads (EAGAIN from fork/clone; host threads %d, kernel.pid_max %d)", hostTasks(), r.pidMax)
	case strings.Contains(text, "cannot allocate memory") || strings.Contains(text, "out of memory"):
		kind = fmt.Sprintf("memory (ENOMEM; %s available)", mib(meminfo("MemAvailable")))
	case strings.Contains(text, "no space left on device"):
		kind = "a kernel count (ENOSPC: namespaces, inotify or a full disk)"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(text, "timeout"):
		kind = "time (a request timed out)"
	}
	return fmt.Sprintf("%s: %s failed after %d live: %.300s", kind, what, last.n, err.Error())
}

// densityCreate makes a sandbox for each thread, densityCreators at a
// time, and returns the threads that got one with each create's latency.
func densityCreate(ctx context.Context, base string, threads []string) ([]string, []time.Duration, error) {
	var mu sync.Mutex
	var created []string
	var lat []time.Duration
	err := eachThread(ctx, densityCreators, threads, func(ctx context.Context, i int) error {
		t0 := time.Now()
		if err := getOK(ctx, setupClient, base+"/threads/"+threads[i]+"/v1/sandbox"); err != nil {
			return err
		}
		d := time.Since(t0)
		mu.Lock()
		created, lat = append(created, threads[i]), append(lat, d)
		mu.Unlock()
		return nil
	})
	if err == nil {
		err = ctx.Err()
	}
	// A failed create may still have left a sandbox: destroy it with the rest.
	if err != nil {
		for _, t := range threads {
			if !slices.Contains(created, t) {
				created = append(created, t)
			}
		}
		return created, lat, err
	}
	return created, lat, nil
}

// eachThread calls fn for each index of threads, workers at a time; the
// first error cancels the context the others run with, stops the rest
// and is returned.
func eachThread(ctx context.Context, workers int, threads []string, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range threads {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(ctx, i) })
	}
	return g.Wait()
}

// densityMeasure samples the host, the gateway and the sandboxes, then
// sweeps threads twice in random order (kept-alive client, then a new
// connection per request) and measures the background CPU in a quiet window.
func densityMeasure(ctx context.Context, gwPid int, base string, rdb *redis.Client, threads []string) (densityStep, error) {
	s := densityStep{n: len(threads)}
	g, err := sampleGateway(ctx, gwPid, base, rdb)
	if err != nil {
		return s, err
	}
	s.gatewayRSS, s.gatewayFDs, s.goroutines, s.redis = g.rss, g.fds, g.goroutines, g.redis
	if s.gateway, err = readRollup(gwPid); err != nil {
		return s, err
	}
	tree, err := readProcTree()
	if err != nil {
		return s, err
	}
	pids := tree.descendants(gwPid)
	s.sandboxes = measureProcs(pids)
	m := readMeminfo()
	s.hostUsed, s.tasks, s.kernel = m["MemTotal"]-m["MemAvailable"], hostTasks(), readKernelMem(m)
	if len(threads) > 0 {
		keep := keptAliveClient()
		lat, err := sweep(ctx, keep, base, threads)
		keep.CloseIdleConnections()
		if err != nil {
			return s, fmt.Errorf("kept-alive sweep: %w", err)
		}
		s.keep = summarize(lat)
		if lat, err = sweep(ctx, newConnClient, base, threads); err != nil {
			return s, fmt.Errorf("new-connection sweep: %w", err)
		}
		s.fresh = summarize(lat)
	}
	// The quiet window: what the gateway's loops and the idle sandboxes
	// cost with nobody asking anything.
	gw0, sb0 := groupCPUOf([]int{gwPid}), groupCPUOf(pids)
	t0 := time.Now()
	if err := sleepCtx(ctx, densityIdle); err != nil {
		return s, err
	}
	wall := time.Since(t0).Seconds()
	s.gatewayIdle = (groupCPUOf([]int{gwPid}) - gw0).Seconds() / wall
	s.sbxIdle = (groupCPUOf(pids) - sb0).Seconds() / wall
	s.load = loadAvg()
	return s, nil
}

// sweep sends one GET /threads/{t}/v1/sandbox to each thread, in a random
// order, densitySweepers at a time, and returns each request's latency.
func sweep(ctx context.Context, client *http.Client, base string, threads []string) ([]time.Duration, error) {
	order := slices.Clone(threads)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	lat := make([]time.Duration, len(order))
	err := eachThread(ctx, densitySweepers, order, func(ctx context.Context, i int) error {
		t0 := time.Now()
		err := getOK(ctx, client, base+"/threads/"+order[i]+"/v1/sandbox")
		lat[i] = time.Since(t0)
		if err != nil {
			return fmt.Errorf("thread %s: %w", order[i], err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lat, ctx.Err()
}

// keptAliveClient keeps a connection per sweeper.
func keptAliveClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: densitySweepers}, Timeout: time.Minute}
}

// densityHold sweeps threads over and over for opts.DensityHold, with the
// figures of each sweep on stderr.
func densityHold(ctx context.Context, base string, threads []string) error {
	if opts.DensityHold <= 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "bench: density: holding %d sandboxes for %s (pid %d's children)\n", len(threads), opts.DensityHold, os.Getpid())
	keep := keptAliveClient()
	defer keep.CloseIdleConnections()
	for end := time.Now().Add(opts.DensityHold); time.Now().Before(end); {
		t0 := time.Now()
		lat, err := sweep(ctx, keep, base, threads)
		if err != nil {
			return fmt.Errorf("held sweep: %w", err)
		}
		s := summarize(lat)
		fmt.Fprintf(os.Stderr, "bench: density: held sweep at %s: p50 %s p99 %s ms, load %s\n", t0.UTC().Format("15:04:05.000"), ms(s.P50), ms(s.P99), loadAvg())
	}
	return nil
}

// destroyParallel destroys the threads' sandboxes through the gateway, 8
// at a time.
func destroyParallel(ctx context.Context, base string, threads []string) {
	_ = eachThread(ctx, 8, threads, func(ctx context.Context, i int) error {
		destroyThreads(ctx, base, threads[i:i+1])
		return nil
	})
}

// oneSandbox is where one sandbox's memory goes: its smaps by mapping
// kind, and its own footprint.
func oneSandbox(gwPid int) (map[string]int64, map[string]int, procGroup) {
	tree, err := readProcTree()
	if err != nil || len(tree[gwPid]) == 0 {
		return nil, nil, procGroup{}
	}
	pid := tree[gwPid][len(tree[gwPid])/2]
	split, count, err := smapsBreakdown(pid)
	if err != nil {
		return nil, nil, procGroup{}
	}
	return split, count, measureProcs(append([]int{pid}, tree.descendants(pid)...))
}
