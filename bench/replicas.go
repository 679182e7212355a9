package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// replicaCount is how many gateways share one Redis in this suite.
const replicaCount = 3

func init() { register("replicas", replicasSuite) }

// replicasSuite measures new threads on three gateway replicas sharing one
// redis-server and one data directory (process backend): the first request
// of a new thread, with new threads spread round-robin over the replicas,
// one at a time and one per replica at once; and what the second request
// of a thread costs on another replica (no cached route there: a Redis read
// and a new connection to the sandbox) against the same replica (cached).
func replicasSuite(ctx context.Context) (Result, error) {
	began := time.Now()
	env, err := startSuiteEnv(ctx, "replicas")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	dataDir := filepath.Join(env.tmp, "data")
	bases := make([]string, replicaCount)
	// made are the threads whose sandbox each replica created (and is the
	// parent of): cleanup destroys what is left of them through it.
	made := make([][]string, replicaCount)
	for i := range bases {
		gw, addr, err := startGateway(ctx, env.bin, env.redisAddr, dataDir, filepath.Join(env.tmp, fmt.Sprintf("gateway-%d.log", i)))
		if err != nil {
			return Result{}, err
		}
		env.cleanup.push(func(context.Context) { gw.stop(syscall.SIGTERM, 10*time.Second) })
		bases[i] = "http://" + addr
		// Runs before the gateway stops (cleanup is last in, first out).
		env.cleanup.push(func(ctx context.Context) { destroyThreads(ctx, bases[i], made[i]) })
	}
	get := func(replica int, thread string) (time.Duration, error) {
		t0 := time.Now()
		_, err := call(ctx, "GET", bases[replica]+"/threads/"+thread+"/v1/sandbox", "", nil)
		return time.Since(t0), err
	}

	// One unmeasured new thread per replica: first-use effects of each process.
	for i := range replicaCount {
		thread := fmt.Sprintf("warmup-%d", i)
		made[i] = append(made[i], thread)
		if _, err := get(i, thread); err != nil {
			return Result{}, err
		}
	}

	var first, other, same, burst []time.Duration
	for n := range opts.ReplicaThreads {
		a, b := n%replicaCount, (n+1)%replicaCount
		thread := fmt.Sprintf("seq-%d", n)
		made[a] = append(made[a], thread)
		d, err := get(a, thread)
		if err != nil {
			return Result{}, err
		}
		first = append(first, d)
		if d, err = get(b, thread); err != nil {
			return Result{}, err
		}
		other = append(other, d)
		if d, err = get(a, thread); err != nil {
			return Result{}, err
		}
		same = append(same, d)
		// Keep the machine's sandbox count flat across the run.
		destroyThreads(ctx, bases[a], []string{thread})
	}
	for n := range max(opts.ReplicaThreads/replicaCount, 1) {
		thread := func(i int) string { return fmt.Sprintf("burst-%d-%d", n, i) }
		for i := range replicaCount {
			made[i] = append(made[i], thread(i))
		}
		ds, err := burstOnce(ctx, replicaCount, thread, get)
		if err != nil {
			return Result{}, err
		}
		burst = append(burst, ds...)
		for i := range replicaCount {
			destroyThreads(ctx, bases[i], []string{thread(i)})
		}
	}

	fs, os2, ss := summarize(first), summarize(other), summarize(same)
	return Result{
		Title:   "Three replicas on one Redis: new threads and the second request elsewhere",
		Columns: statsColumns,
		Rows: [][]string{
			statsRow("new thread, first GET, threads round-robin over the replicas, one at a time (process cold create)", fs),
			statsRow(fmt.Sprintf("new threads, first GET, %d at once (one per replica)", replicaCount), summarize(burst)),
			statsRow("second GET of the thread on another replica (no cached route: Redis read + new sandbox connection)", os2),
			statsRow("third GET, back on the creating replica (cached route)", ss),
		},
		Figures: map[string]float64{"first.p50_ms": msF(fs.P50), "other_replica.p50_ms": msF(os2.P50), "same_replica.p50_ms": msF(ss.P50)},
		Notes: []string{
			fmt.Sprintf("%d gateways (`--max-sandboxes 0 --log-level warn`, process backend, built with CGO_ENABLED=0) on one real redis-server "+
				"and one data directory, as replicas behind a load balancer would be. %d new threads one at a time, thread n first on replica "+
				"n mod %d, then on the next replica, then back; each thread's sandbox is destroyed after its three requests, so the number "+
				"of sandboxes on the machine stays flat. The burst row starts one new thread on every replica at the same moment, %d times.",
				replicaCount, opts.ReplicaThreads, replicaCount, max(opts.ReplicaThreads/replicaCount, 1)),
			fmt.Sprintf("A request that lands on another replica than the one that created the sandbox costs %s ms more at p50 than "+
				"one on a replica with the route cached: it reads the record from Redis and opens its own connection to the sandbox "+
				"(each replica keeps its own connection pool per sandbox incarnation).", ms(os2.P50-ss.P50)),
			"Compare the first-request rows with the single-gateway row of the lifecycle suite: the replicas share Redis, the " +
				"provisioning lock and the machine's 2 cores, so the burst row pays for three process starts at once.",
			fmt.Sprintf("The suite took %s.", time.Since(began).Round(time.Second)),
		},
	}, nil
}

// burstOnce sends the first request of n new threads, thread(i) to replica
// i, all at once, and returns each request's latency.
func burstOnce(ctx context.Context, n int, thread func(int) string, get func(int, string) (time.Duration, error)) ([]time.Duration, error) {
	ds, errs := make([]time.Duration, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ds[i], errs[i] = get(i, thread(i))
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ds, ctx.Err()
}
