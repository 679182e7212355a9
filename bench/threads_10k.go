package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/identity"
)

// scaleClients drive the threads through the gateway concurrently.
const scaleClients = 8

func init() { register("threads-10k", threadsAtScale) }

// threadsAtScale measures what many threads cost: a real gateway process
// (remote backend, real redis-server) is driven through opts.ScaleThreads
// new threads, each getting a record in Redis and a cached route, and its
// VmRSS, heap and open files are read before and after; then Redis memory
// per record and reaper passes over that many records. The remote backend
// points at a stand-in provisioner that hands out one real sandbox for
// every thread, so no thread needs a sandbox process of its own.
func threadsAtScale(ctx context.Context) (Result, error) {
	began := time.Now()
	env, err := startSuiteEnv(ctx, "scale")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	tmp, bin, cleanup := env.tmp, env.bin, &env.cleanup
	rdb := redis.NewClient(&redis.Options{Addr: env.redisAddr})
	cleanup.push(func(context.Context) { rdb.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The one upstream: a real sandbox server, started by the process backend
	// without isolation, on a loopback port: the remote backend takes http
	// URLs only (an isolated sandbox listens on a Unix socket).
	be, err := process.New(process.Config{Binary: process.SandboxBinary(bin), StateDir: filepath.Join(tmp, "state"),
		Isolation: process.IsolationNone}, quiet)
	if err != nil {
		return Result{}, err
	}
	mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: filepath.Join(tmp, "upstream")}, "bench", "upstream")
	if err != nil {
		return Result{}, err
	}
	upstream, err := be.Create(ctx, backend.Spec{SandboxID: identity.SandboxID("bench", "upstream"), User: "bench", Thread: "upstream", Mounts: mounts})
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(ctx context.Context) { _ = be.Destroy(ctx, upstream) })
	prov, err := startStandinProvisioner(upstream.URL)
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(context.Context) { prov.close() })

	// A cache TTL longer than the run keeps every route cached while it is
	// measured (by default a route is re-read after 5 s and dropped a minute
	// after that if unused, so memory follows the last minute's threads).
	// The per-user create rate (60 a minute by default) is off: one user
	// makes every thread here, and the limiter is not what is measured.
	gw, gaddr, err := startGatewayEnv(ctx, bin, env.redisAddr, filepath.Join(tmp, "data"), filepath.Join(tmp, "gateway.log"), nil,
		"--backend", "remote", "--provisioner-url", prov.url, "--cache-ttl", "1h", "--create-rate", "0")
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(context.Context) { gw.stop(syscall.SIGTERM, 10*time.Second) })
	base := "http://" + gaddr

	n := opts.ScaleThreads
	before, err := sampleGateway(ctx, gw.pid(), base, rdb)
	if err != nil {
		return Result{}, err
	}
	t0 := time.Now()
	first, err := driveThreads(ctx, base, n)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(tmp, "gateway.log"))
		return Result{}, fmt.Errorf("first pass: %w\n%.2000s", err, log)
	}
	drive := time.Since(t0)
	if got := prov.creates.Load(); got != int64(n) {
		return Result{}, fmt.Errorf("first pass made %d sandboxes, want %d", got, n)
	}
	after, err := sampleGateway(ctx, gw.pid(), base, rdb)
	if err != nil {
		return Result{}, err
	}
	again, err := driveThreads(ctx, base, n)
	if err != nil {
		return Result{}, fmt.Errorf("second pass: %w", err)
	}
	if got := prov.creates.Load(); got != int64(n) {
		return Result{}, fmt.Errorf("second pass created %d more sandboxes: routes were not cached", got-int64(n))
	}
	final, err := sampleGateway(ctx, gw.pid(), base, rdb)
	if err != nil {
		return Result{}, err
	}

	records := n
	mem, idle, expired, err := reaperAtScale(ctx, rdb, quiet, records, records/10)
	if err != nil {
		return Result{}, err
	}

	per := func(a, b int64) string { return fmt.Sprintf("%+.0f B", float64(b-a)/float64(n)) }
	fs, as, is := summarize(first), summarize(again), summarize(idle)
	rows := [][]string{
		{fmt.Sprintf("new threads driven through the gateway (%d clients, one request each)", scaleClients),
			fmt.Sprintf("%d in %s (%.0f/s)", n, drive.Round(time.Millisecond), float64(n)/drive.Seconds()), "—"},
		{"gateway VmRSS: started, no thread → " + fmt.Sprint(n) + " threads with cached routes",
			mib(before.rss) + " → " + mib(after.rss), per(before.rss, after.rss)},
		{"gateway VmRSS after a second request to every thread (all cached)", mib(final.rss), per(before.rss, final.rss)},
		{"gateway Go heap in use (go_memstats_heap_inuse_bytes), before → after", mib(before.heap) + " → " + mib(after.heap),
			per(before.heap, after.heap)},
		{"gateway goroutines, before → after", fmt.Sprintf("%d → %d", before.goroutines, after.goroutines), "—"},
		{"gateway open file descriptors, before → after", fmt.Sprintf("%d → %d", before.fds, after.fds),
			fmt.Sprintf("%+.2f", float64(after.fds-before.fds)/float64(n))},
		{"Redis used_memory, records written by the gateway", mib(before.redis) + " → " + mib(after.redis), per(before.redis, after.redis)},
		{fmt.Sprintf("Redis used_memory per record, %d records written by the store directly", records), fmt.Sprintf("%d B", mem), "—"},
		{"first request of a new thread (remote backend create), p50 / p99", ms(fs.P50) + " / " + ms(fs.P99) + " ms", "—"},
		{fmt.Sprintf("request to a cached thread among %d, p50 / p99", n), ms(as.P50) + " / " + ms(as.P99) + " ms", "—"},
		{fmt.Sprintf("reaper pass over %d records, none expired, p50 / p99 (%d passes)", records, is.N), ms(is.P50) + " / " + ms(is.P99) + " ms", "—"},
		{fmt.Sprintf("reaper pass, %d of %d records expired (no-op destroy)", records/10, records), ms(expired) + " ms",
			fmt.Sprintf("%s ms per reaped sandbox", ms(expired/time.Duration(max(records/10, 1))))},
	}
	return Result{
		Title:   fmt.Sprintf("The cost of %d threads: gateway memory, Redis memory, reaper", n),
		Columns: []string{"measurement", "value", "per thread / record"},
		Rows:    rows,
		Figures: map[string]float64{
			"gateway_rss_before_bytes": float64(before.rss), "gateway_rss_after_bytes": float64(after.rss),
			figRSSPerThread:          float64(after.rss-before.rss) / float64(n),
			figHeapPerThread:         float64(after.heap-before.heap) / float64(n),
			"redis_per_record_bytes": float64(after.redis-before.redis) / float64(n),
			"reaper_idle_p99_ms":     msF(is.P99), "reaper_expired_ms": msF(expired),
		},
		Notes: []string{
			fmt.Sprintf("One real gateway process (`--backend remote --cache-ttl 1h --create-rate 0`, otherwise as the other suites: real redis-server, "+
				"`--max-sandboxes 0 --log-level warn`), driven by %d concurrent clients through %d new threads, one GET "+
				"/threads/{t}/v1/sandbox each. Its remote backend talks to a stand-in provisioner in the bench process (DeerFlow's "+
				"provisioner API: capabilities, create, get, list, delete) that answers every create with the URL of one real "+
				"sandbox server: each thread gets its own Redis record, cached route and connection pool, as with real sandboxes, "+
				"without %d sandbox processes. The second pass made no create (checked), so every route was still cached.", scaleClients, n, n),
			"VmRSS is read from /proc/PID/status; Go's heap figure from the gateway's own /metrics. Each cached route keeps its " +
				"connection pool, here one idle keep-alive connection to the upstream (one file descriptor per thread), as it would " +
				"to a sandbox of its own; the Go runtime returns freed memory to the OS lazily, so VmRSS is an upper bound.",
			"The reaper rows run the pool's reaper (in the bench process, a backend whose destroy does nothing) over records written " +
				"straight to the same redis-server: a pass reads only the expired range of each index (ZRANGEBYSCORE with a limit), so " +
				"with nothing expired it costs two small reads; each expired sandbox costs a lock, a claim script and a destroy.",
			fmt.Sprintf("The suite took %s.", time.Since(began).Round(time.Second)),
		},
	}, nil
}

// gatewaySample is the gateway's footprint at one moment.
type gatewaySample struct {
	rss, heap, redis int64
	fds, goroutines  int
}

func sampleGateway(ctx context.Context, pid int, base string, rdb *redis.Client) (gatewaySample, error) {
	var s gatewaySample
	var err error
	if s.rss, err = vmRSS(pid); err != nil {
		return s, err
	}
	if s.fds, err = openFDs(pid); err != nil {
		return s, err
	}
	if s.redis, err = usedMemory(ctx, rdb); err != nil {
		return s, err
	}
	body, err := call(ctx, http.MethodGet, base+"/metrics", "", nil)
	if err != nil {
		return s, err
	}
	m := promValues(string(body), "go_memstats_heap_inuse_bytes", "go_goroutines")
	s.heap, s.goroutines = int64(m["go_memstats_heap_inuse_bytes"]), int(m["go_goroutines"])
	return s, nil
}

// promValues reads unlabelled samples from Prometheus text exposition.
func promValues(text string, names ...string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	return out
}

// driveThreads sends one GET /threads/{t}/v1/sandbox for each of n threads
// with scaleClients clients, and returns each request's latency.
func driveThreads(ctx context.Context, base string, n int) ([]time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: scaleClients}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range scaleClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := getOK(ctx, client, base+"/threads/t-"+strconv.Itoa(i)+"/v1/sandbox")
				lat[i] = time.Since(t0)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return lat, ctx.Err()
}

func getOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d: %.200s", url, resp.StatusCode, body)
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
