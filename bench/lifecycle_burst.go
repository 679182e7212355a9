package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/statedb"
)

// The burst row: burstThreads new threads arrive at once at a gateway
// whose pre-started pool of burstPrewarm is full. A pool as large as the
// burst would serve it all warm by construction; one a fifth of it shows
// what the refill does while the burst is served.
const (
	burstThreads = 100
	burstPrewarm = 20
)

// Figure keys of the burst row (lifecycle).
const (
	figFirstPrewarmNewP50 = "first_request.prewarm_new_conn.p50_ms"
	figFirstPrewarmNewP99 = "first_request.prewarm_new_conn.p99_ms"
	figBurstWarm          = "burst.warm"
	figBurstP50           = "burst.p50_ms"
	figBurstP99           = "burst.p99_ms"
	figBurstRefillMS      = "burst.refill_ms"
)

// burst is what prewarmBurst measured: each thread's first request by how
// it was served, and how long the pool took to be full again.
type burst struct {
	warm, cold []time.Duration
	refill     time.Duration
}

// prewarmBurst sends burstThreads first requests (PUT /threads/{t}/sandbox,
// whose answer names the outcome: prewarm or cold) at the same moment, on
// a gateway of its own whose pool is full and has seen no claim.
func prewarmBurst(ctx context.Context, env *suiteEnv) (burst, error) {
	const prefix = "bench:{lcburst}:"
	dir := filepath.Join(env.tmp, "gw-burst")
	gs, gaddr, err := startGatewayEnv(ctx, env.bin, env.redisAddr, dir, filepath.Join(env.tmp, "gateway-burst.log"), nil,
		"--prewarm", strconv.Itoa(burstPrewarm), "--redis-prefix", prefix, "--create-rate", "0")
	if err != nil {
		return burst{}, err
	}
	base := "http://" + gaddr
	threads := make([]string, burstThreads)
	for i := range threads {
		threads[i] = "burst-" + strconv.Itoa(i)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		destroyThreads(dctx, base, threads)
		gs.stop(syscall.SIGTERM, 5*time.Second)
		_ = destroyAll(dctx, process.Config{Binary: env.bin, StateDir: filepath.Join(dir, "sandboxes", "process")})
	}()
	rdb := redis.NewClient(&redis.Options{Addr: env.redisAddr})
	defer rdb.Close()
	keys := statedb.NewKeys(prefix, 0)
	if err := waitPoolFull(ctx, rdb, keys, burstPrewarm, 2*time.Minute); err != nil {
		return burst{}, err
	}

	var (
		mu    sync.Mutex
		b     burst
		errs  []error
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for _, t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			body, err := call(ctx, "PUT", base+"/threads/"+t+"/sandbox", "", nil)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case strings.Contains(string(body), `"outcome":"prewarm"`):
				b.warm = append(b.warm, d)
			case strings.Contains(string(body), `"outcome":"cold"`):
				b.cold = append(b.cold, d)
			default:
				errs = append(errs, fmt.Errorf("thread %s: unexpected answer %.200s", t, body))
			}
		}()
	}
	close(start)
	wg.Wait()
	ended := time.Now()
	if err := errors.Join(errs...); err != nil {
		return burst{}, fmt.Errorf("burst: %w", err)
	}
	if err := waitPoolFull(ctx, rdb, keys, burstPrewarm, 2*time.Minute); err != nil {
		return burst{}, err
	}
	b.refill = time.Since(ended)
	return b, nil
}

// waitPoolFull waits until size pre-started sandboxes are indexed.
func waitPoolFull(ctx context.Context, rdb *redis.Client, keys statedb.Keys, size int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		n, err := rdb.ZCard(ctx, keys.Prewarm()).Result()
		if err != nil {
			return err
		}
		if n >= int64(size) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prewarm pool at %d of %d after %s", n, size, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (b burst) all() []time.Duration {
	return append(append([]time.Duration(nil), b.warm...), b.cold...)
}

func (b burst) rows() [][]string {
	label := fmt.Sprintf("burst: %d new threads at once, PUT /threads/{t}/sandbox (--prewarm %d, full)", burstThreads, burstPrewarm)
	return [][]string{
		statsRow(label+", all", summarize(b.all())),
		statsRow(label+", those that claimed a pre-started sandbox", summarize(b.warm)),
		statsRow(label+", those created cold", summarize(b.cold)),
	}
}

func (b burst) figures(f map[string]float64) {
	s := summarize(b.all())
	f[figBurstWarm], f[figBurstP50], f[figBurstP99], f[figBurstRefillMS] = float64(len(b.warm)), msF(s.P50), msF(s.P99), msF(b.refill)
}

func (b burst) note() string {
	return fmt.Sprintf("Burst: a third gateway (`--prewarm %d --create-rate 0`, its own Redis prefix) whose pool is full; %d goroutines "+
		"each send one new thread's first request (PUT /threads/{t}/sandbox: its answer names the outcome) at the same moment, on new "+
		"connections. %d of %d were served a pre-started sandbox, %d created cold; the refill starts after the first claim and competes "+
		"with the cold creates for the 2 cores, and the pool was full again %.0f ms after the last answer.",
		burstPrewarm, burstThreads, len(b.warm), burstThreads, len(b.cold), msF(b.refill))
}
