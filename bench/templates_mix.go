package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/statedb"
)

// The mixed workload: new threads arriving at random (exponential
// inter-arrival times, a fixed seed), each choosing a template by
// tplMix's weights, on a gateway whose prewarm pool of tplPrewarmTotal
// the templates share (each keeps at least one).
const (
	tplMixPrefix     = "bench:{tplmix}:"
	tplPrewarmTotal  = 12
	tplMeanArrival   = 300 * time.Millisecond
	tplMixSeed       = 38 // issue 38
	tplSampleEvery   = 250 * time.Millisecond
	tplSampleAfter   = 3 * time.Second // the refill after the last arrival
	tplTableInterval = 2 * time.Second // the pool table's rows
)

// mixThread is one new thread of the mixed workload.
type mixThread struct {
	name, template string
	at, took       time.Duration // arrival since the start; the PUT's latency
	outcome        string
	err            error
}

type mixResult struct {
	threads []mixThread
	// series: "t_ms" (since the first arrival), "arrived" (threads by
	// then), "claimed" (PUTs answered with a claim by then) and one
	// pre-started count per template, by its name.
	series map[string][]float64
	mean   time.Duration
}

// latencies are the PUT latencies of template's threads ("" = all).
func (m mixResult) latencies(template string) []time.Duration {
	var out []time.Duration
	for _, t := range m.threads {
		if template == "" || t.template == template {
			out = append(out, t.took)
		}
	}
	return out
}

// claimed counts template's threads that got a pre-started sandbox.
func (m mixResult) claimed(template string) int {
	n := 0
	for _, t := range m.threads {
		if (template == "" || t.template == template) && t.outcome == "prewarm" {
			n++
		}
	}
	return n
}

func mixedWorkload(ctx context.Context, env *suiteEnv, rdb *redis.Client, dataDir, yaml string) (mixResult, error) {
	store := statedb.NewStore(rdb, tplMixPrefix)
	gs, gaddr, err := mixedGateway(ctx, env, dataDir, yaml, store, tplPrewarmTotal)
	if err != nil {
		return mixResult{}, err
	}
	defer gs.stop(syscall.SIGTERM, 5*time.Second)
	base := "http://" + gaddr
	names, err := prewarmTemplates(ctx, store)
	if err != nil {
		return mixResult{}, err
	}

	n := tplMixedThreadsFull
	if opts.Quick {
		n = tplMixedThreadsFull / 2
	}
	rng := rand.New(rand.NewPCG(tplMixSeed, tplMixSeed))
	threads := make([]mixThread, n)
	var at time.Duration
	for i := range threads {
		at += time.Duration(rng.ExpFloat64() * float64(tplMeanArrival))
		threads[i] = mixThread{name: "mix-" + strconv.Itoa(i), template: pickTemplate(rng.Float64()), at: at}
	}
	var all []string
	for _, t := range threads {
		all = append(all, t.name)
	}
	defer destroyThreads(context.WithoutCancel(ctx), base, all)

	res := mixResult{series: map[string][]float64{}, mean: tplMeanArrival}
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
				return mixResult{}, ctx.Err()
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
		return mixResult{}, err
	}
	for _, t := range threads {
		if t.err != nil {
			return mixResult{}, fmt.Errorf("thread %s: %w", t.name, t.err)
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

// poolTable summarises the series: a row every tplTableInterval, the
// lowest count each template fell to, and the last sample.
func (m mixResult) poolTable() Table {
	cols := []string{"t (s)", "threads arrived", "claims answered"}
	for _, t := range tplMix {
		cols = append(cols, fmt.Sprintf("%s pre-started (%.0f %%)", t.name, t.weight*100))
	}
	ts := m.series["t_ms"]
	var rows [][]string
	row := func(i int, label string) []string {
		r := []string{label, fmt.Sprint(m.series["arrived"][i]), fmt.Sprint(m.series["claimed"][i])}
		for _, t := range tplMix {
			r = append(r, fmt.Sprint(m.series[t.name][i]))
		}
		return r
	}
	next := 0.0
	for i, t := range ts {
		if t >= next || i == len(ts)-1 {
			rows = append(rows, row(i, fmt.Sprintf("%.2f", t/1000)))
			next += msF(tplTableInterval)
		}
	}
	low := []string{"lowest", "", ""}
	for _, t := range tplMix {
		v := -1.0
		for _, c := range m.series[t.name] {
			if v < 0 || c < v {
				v = c
			}
		}
		low = append(low, fmt.Sprint(v))
	}
	rows = append(rows, low)
	return Table{Title: fmt.Sprintf("Pre-started sandboxes per template during the mixed workload (sampled every %s with "+
		"statedb.Store.PrewarmCounts; every sample is in the result JSON's `series`):", tplSampleEvery), Columns: cols, Rows: rows}
}

// notes describe the mixed workload and its claim misses.
func (m mixResult) notes() []string {
	var missed []string
	for _, t := range m.threads {
		if t.outcome != "prewarm" {
			missed = append(missed, fmt.Sprintf("%s (%s at %.2f s: %s, %.1f ms)", t.name, t.template, t.at.Seconds(), t.outcome, msF(t.took)))
		}
	}
	last := time.Duration(0)
	if len(m.threads) > 0 {
		last = m.threads[len(m.threads)-1].at
	}
	out := []string{fmt.Sprintf("Mixed workload: %d new threads over %.1f s, exponential inter-arrival times (mean %s, seed %d), "+
		"each a PUT /threads/{t}/sandbox {\"template\": ...} sent as it arrives, concurrently when arrivals bunch "+
		"(one HTTP client, keep-alive: an idle connection is reused, else a new one is dialled), "+
		"templates chosen %s; `--prewarm %d` shared by the four templates (each `prewarm: 1`, the rest by recent claims, "+
		"pool/demand.go), started full. Threads are kept until the end (24 GiB of memory hold them); the claim rate and "+
		"first-request goals are in the Goals table.", len(m.threads), last.Seconds(), m.mean, tplMixSeed, tplWeights(), tplPrewarmTotal)}
	if len(missed) > 0 {
		out = append(out, fmt.Sprintf("Threads not given a pre-started sandbox: %v.", missed))
	}
	return out
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
