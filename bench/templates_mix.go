package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/statedb"
)

// The mixed workload: new threads arriving at random (exponential
// inter-arrival times), each choosing a template by tplMix's weights, on a
// gateway whose prewarm pool of tplPrewarmTotal the templates share (each
// keeps at least one). It runs once per seed, each round on a new gateway
// with a full pool and no claims yet: one seed is one draw of a random
// process, and the first claims are where the shares move most.
const (
	tplPrewarmTotal  = 12
	tplMeanArrival   = 300 * time.Millisecond
	tplSampleEvery   = 250 * time.Millisecond
	tplSampleAfter   = 3 * time.Second // the refill after the last arrival
	tplTableInterval = 2 * time.Second // the pool table's rows
)

// tplMixSeeds are the rounds' seeds, chosen before any was run.
var tplMixSeeds = []uint64{1, 2, 3}

// mixThread is one new thread of the mixed workload.
type mixThread struct {
	name, template string
	at, took       time.Duration // arrival since the start; the PUT's latency
	outcome        string
	err            error
}

// mixRound is one seed's run.
type mixRound struct {
	seed    uint64
	threads []mixThread
	// series: "t_ms" (since the first arrival), "arrived" (threads by
	// then), "claimed" (PUTs answered with a claim by then) and one
	// pre-started count per template, by its name.
	series map[string][]float64
}

type mixResult []mixRound

// threads are every round's.
func (m mixResult) threads() []mixThread {
	var out []mixThread
	for _, r := range m {
		out = append(out, r.threads...)
	}
	return out
}

// latencies are the PUT latencies of template's threads ("" = all).
func (m mixResult) latencies(template string) []time.Duration {
	var out []time.Duration
	for _, t := range m.threads() {
		if template == "" || t.template == template {
			out = append(out, t.took)
		}
	}
	return out
}

// claimed counts template's threads that got a pre-started sandbox.
func (m mixResult) claimed(template string) int {
	n := 0
	for _, t := range m.threads() {
		if (template == "" || t.template == template) && t.outcome == "prewarm" {
			n++
		}
	}
	return n
}

// series are the rounds' samples, each key prefixed "seed<N>.".
func (m mixResult) series() map[string][]float64 {
	out := map[string][]float64{}
	for _, r := range m {
		for k, v := range r.series {
			out[fmt.Sprintf("seed%d.%s", r.seed, k)] = v
		}
	}
	return out
}

// mixedWorkload runs a round per seed, one after the other; each gateway
// and its sandboxes are gone before the next starts.
func mixedWorkload(ctx context.Context, env *suiteEnv, rdb *redis.Client, dataDir, yaml string) (mixResult, error) {
	var out mixResult
	for _, seed := range tplMixSeeds {
		r, err := mixedRound(ctx, env, rdb, dataDir, yaml, seed)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", seed, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func mixedRound(ctx context.Context, env *suiteEnv, rdb *redis.Client, dataDir, yaml string, seed uint64) (mixRound, error) {
	prefix := fmt.Sprintf("bench:{tplmix%d}:", seed)
	store := statedb.NewStore(rdb, prefix)
	gs, gaddr, err := mixedGateway(ctx, env, dataDir, yaml, prefix, store, tplPrewarmTotal)
	if err != nil {
		return mixRound{}, err
	}
	// Last: the pool's unclaimed sandboxes outlive the gateway by design.
	defer func() {
		if err := destroyAll(context.WithoutCancel(ctx), processStateConfig(env, dataDir)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: templates: pre-started sandboxes left running: %v\n", err)
		}
	}()
	defer gs.stop(syscall.SIGTERM, 5*time.Second)
	base := "http://" + gaddr
	names, err := prewarmTemplates(ctx, store)
	if err != nil {
		return mixRound{}, err
	}

	n := tplMixedThreadsFull
	if opts.Quick {
		n = tplMixedThreadsFull / 2
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	threads := make([]mixThread, n)
	var at time.Duration
	for i := range threads {
		at += time.Duration(rng.ExpFloat64() * float64(tplMeanArrival))
		threads[i] = mixThread{name: fmt.Sprintf("mix%d-%d", seed, i), template: pickTemplate(rng.Float64()), at: at}
	}
	var all []string
	for _, t := range threads {
		all = append(all, t.name)
	}
	defer destroyThreads(context.WithoutCancel(ctx), base, all)

	res := mixRound{seed: seed, series: map[string][]float64{}}
	var mu sync.Mutex // threads' took and outcome, read by the sampler
	start := time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan error, 1)
	go func() { sampled <- samplePool(sampleCtx, store, names, start, &mu, threads, res.series) }()

	var wg sync.WaitGroup
	for i := range threads {
		if d := threads[i].at - time.Since(start); d > 0 {
			select {
			case <-ctx.Done():
				stopSampling()
				return mixRound{}, ctx.Err()
			case <-time.After(d):
			}
		}
		wg.Add(1)
		go func(t *mixThread) {
			defer wg.Done()
			took, outcome, err := putTemplate(ctx, base, t.name, t.template)
			mu.Lock()
			t.took, t.outcome, t.err = took, outcome, err
			mu.Unlock()
		}(&threads[i])
	}
	wg.Wait()
	time.Sleep(tplSampleAfter)
	stopSampling()
	if err := <-sampled; err != nil {
		return mixRound{}, err
	}
	for _, t := range threads {
		if t.err != nil {
			return mixRound{}, fmt.Errorf("thread %s: %w", t.name, t.err)
		}
	}
	res.threads = threads
	return res, nil
}

// pickTemplate maps u in [0,1) to a template by tplMix's weights.
func pickTemplate(u float64) string {
	for _, t := range tplMix {
		if u < t.weight {
			return t.name
		}
		u -= t.weight
	}
	return tplMix[len(tplMix)-1].name
}

// prewarmTemplates maps each pre-started sandbox's fingerprint to its
// template, from the full pool's records; every template must have one.
func prewarmTemplates(ctx context.Context, store *statedb.Store) (map[string]string, error) {
	recs, err := store.PrewarmRecords(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range recs {
		out[r.Prewarm] = r.Template
	}
	for _, t := range tplMix {
		found := false
		for _, name := range out {
			found = found || name == t.name
		}
		if !found {
			return nil, fmt.Errorf("no pre-started sandbox of template %s in the full pool (%v)", t.name, out)
		}
	}
	return out, nil
}

// samplePool records the pre-started sandboxes per template every
// tplSampleEvery until ctx ends.
func samplePool(ctx context.Context, store *statedb.Store, names map[string]string, start time.Time,
	mu *sync.Mutex, threads []mixThread, series map[string][]float64) error {
	tick := time.NewTicker(tplSampleEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		counts, err := store.PrewarmCounts(rctx)
		cancel()
		if err != nil {
			return err
		}
		now := time.Since(start)
		byName := map[string]float64{}
		for fp, c := range counts {
			byName[names[fp]] += float64(c)
		}
		arrived, claimed := 0.0, 0.0
		mu.Lock()
		for _, t := range threads {
			if t.at <= now {
				arrived++
			}
			if t.outcome == "prewarm" {
				claimed++
			}
		}
		mu.Unlock()
		series["t_ms"] = append(series["t_ms"], msF(now))
		series["arrived"] = append(series["arrived"], arrived)
		series["claimed"] = append(series["claimed"], claimed)
		for _, t := range tplMix {
			series[t.name] = append(series[t.name], byName[t.name])
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// poolTable summarises a round's series: a row every tplTableInterval,
// the last sample, and the fewest and most each template had.
func (r mixRound) poolTable() Table {
	cols := []string{"t (s)", "threads arrived", "claims answered"}
	for _, t := range tplMix {
		cols = append(cols, fmt.Sprintf("%s pre-started (%.0f %%)", t.name, t.weight*100))
	}
	var rows [][]string
	next := 0.0
	for i, t := range r.series["t_ms"] {
		if t >= next || i == len(r.series["t_ms"])-1 {
			row := []string{fmt.Sprintf("%.2f", t/1000), fmt.Sprint(r.series["arrived"][i]), fmt.Sprint(r.series["claimed"][i])}
			for _, t := range tplMix {
				row = append(row, fmt.Sprint(r.series[t.name][i]))
			}
			rows = append(rows, row)
			next += msF(tplTableInterval)
		}
	}
	low, high := []string{"fewest", "", ""}, []string{"most", "", ""}
	for _, t := range tplMix {
		s := r.series[t.name]
		if len(s) == 0 {
			low, high = append(low, "—"), append(high, "—")
			continue
		}
		low, high = append(low, fmt.Sprint(slices.Min(s))), append(high, fmt.Sprint(slices.Max(s)))
	}
	return Table{Title: fmt.Sprintf("Pre-started sandboxes per template, round with seed %d (sampled every %s with "+
		"statedb.Store.PrewarmCounts; every sample is in the result JSON's `series`):", r.seed, tplSampleEvery),
		Columns: cols, Rows: append(rows, low, high)}
}

// poolTables are the rounds' tables.
func (m mixResult) poolTables() []Table {
	var out []Table
	for _, r := range m {
		out = append(out, r.poolTable())
	}
	return out
}

// notes describe the mixed workload and its claim misses.
func (m mixResult) notes() []string {
	var rounds []string
	for _, r := range m {
		last := time.Duration(0)
		if len(r.threads) > 0 {
			last = r.threads[len(r.threads)-1].at
		}
		claimed := mixResult{r}.claimed("")
		rounds = append(rounds, fmt.Sprintf("seed %d: %d of %d claimed over %.1f s", r.seed, claimed, len(r.threads), last.Seconds()))
	}
	out := []string{fmt.Sprintf("Mixed workload: %d rounds (%s), each of %d new threads with exponential inter-arrival times "+
		"(mean %s) on a new gateway whose pool is full and has seen no claim; each thread a PUT /threads/{t}/sandbox {\"template\": ...} "+
		"sent as it arrives, concurrently when arrivals bunch (one HTTP client, keep-alive: an idle connection is reused, else a new "+
		"one is dialled), templates chosen %s; `--prewarm %d` shared by the four templates (each `prewarm: 1`, the rest by recent "+
		"claims, pool/demand.go). Threads are kept until the round ends (24 GiB of memory hold them); the claim rate and "+
		"first-request goals (all rounds together) are in the Goals table.",
		len(m), strings.Join(rounds, "; "), len(m[0].threads), tplMeanArrival, tplWeights(), tplPrewarmTotal)}
	var missed []string
	for _, t := range m.threads() {
		if t.outcome != "prewarm" {
			missed = append(missed, fmt.Sprintf("%s (%s at %.2f s: %s, %.1f ms)", t.name, t.template, t.at.Seconds(), t.outcome, msF(t.took)))
		}
	}
	if len(missed) > 0 {
		out = append(out, fmt.Sprintf("Threads not given a pre-started sandbox: %s.", strings.Join(missed, ", ")))
	}
	return append(out, m.swing())
}

// swing names the template that held the most pre-started sandboxes
// against its share of arrivals: how far the demand shares moved.
func (m mixResult) swing() string {
	var best struct {
		seed     uint64
		t        tplSpec
		most, at float64
		ratio    float64
	}
	for _, r := range m {
		for _, t := range tplMix {
			for i, c := range r.series[t.name] {
				if ratio := c / (t.weight * tplPrewarmTotal); ratio > best.ratio {
					best.seed, best.t, best.most, best.at, best.ratio = r.seed, t, c, r.series["t_ms"][i], ratio
				}
			}
		}
	}
	return fmt.Sprintf("The shares move with each claim: the most any template held against its share of arrivals was %s's %.0f of %d "+
		"(it has %.0f %% of arrivals, %.1f of %d by that share) at %.2f s in the round with seed %d; each template starts from a prior "+
		"of 2 claims, a template's ready sandboxes over its share are trimmed only for the room another needs, and the refill "+
		"starts the template furthest below its share first, one create at a time.",
		best.t.name, best.most, tplPrewarmTotal, best.t.weight*100, best.t.weight*tplPrewarmTotal, tplPrewarmTotal, best.at/1000, best.seed)
}

func tplWeights() string {
	s := ""
	for i, t := range tplMix {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %.0f %%", t.name, t.weight*100)
	}
	return s
}
