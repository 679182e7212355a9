package pool

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/telemetry"
)

const (
	// metricsHistory is how many samples a sandbox's ring keeps (a minute
	// at the default interval).
	metricsHistory = 60
	// metricsSlowEvery: a backend with no cheap meter (docker's engine
	// stats, a kubernetes sandbox server: an HTTP round trip each) is
	// measured once every this many intervals.
	metricsSlowEvery = 5
	// metricsAskedFor is how long a sandbox whose metrics a client asked
	// for is sampled although this replica serves it no request.
	metricsAskedFor = time.Minute
	// metricsSlowConcurrency bounds the round trips of slow measurements.
	metricsSlowConcurrency = 8
	// metricsDiskEvery: a sandbox's disk (its thread's data, its writable
	// layer: tree walks, or the engine's) is measured once every this many
	// intervals, in the background (samplerdisk.go); its samples carry the
	// latest figures meanwhile.
	metricsDiskEvery = 5
	// metricsWatchBuffer is how many samples a slow stream reader may lag
	// before it misses some (a sample is never waited for).
	metricsWatchBuffer = 4
)

// Sampler measures every live sandbox this replica serves (its cached
// routes, and sandboxes whose metrics were asked for in the last minute)
// every interval, computes CPU % from the previous sample and keeps a
// short ring of samples per sandbox, in memory: each replica knows the
// sandboxes it serves; nothing goes to Redis but an OOM kill's claim. A
// backend's Meter keeps what makes a sample cheap (the process backend:
// open cgroup v2 files, six preads a sample; docs/OBSERVABILITY.md has
// the cost).
type Sampler struct {
	p samplerParams

	mu     sync.Mutex
	passes int
	// phases numbers the series made, spreading the samples of meters
	// that open their files over the passes.
	phases int
	series map[string]*series // by sandbox id
	// disking is set while a disk pass runs: one at a time.
	disking atomic.Bool
}

type samplerParams struct {
	interval    time.Duration
	backendName string
	backend     backend.Backend
	cache       *cache
	meters      SamplerMeters
	// oomKilled reports OOM kills a sample found (notifier.oomKilled);
	// nil = not reported.
	oomKilled func(ctx context.Context, info backend.Info, what string, count int64)
	clock     Clock
	log       *slog.Logger
}

// series is one sandbox incarnation's samples.
type series struct {
	sid, thread, incarnation string
	info                     backend.Info
	askedUntil               time.Time // guarded by Sampler.mu

	// phase is the pass, modulo metricsSlowEvery, in which a meter that
	// opens its files per sample samples (opensFiles: set by the meter).
	phase      int
	opensFiles atomic.Bool

	mu     sync.Mutex // one sample at a time; guards the rest
	meter  backend.Meter
	failed int // samples failed in a row: the meter is reopened after
	// ooms is the incarnation's OOM kill count at the last sample.
	ooms int64
	// disk is the last disk measurement (samplerdisk.go).
	disk    diskFigures
	diskAt  time.Time
	ring    [metricsHistory]api.MetricsSample
	n, next int
	watches map[chan api.MetricsSample]struct{}
}

func newSampler(p samplerParams) *Sampler {
	return &Sampler{p: p, series: map[string]*series{}}
}

// newSeries starts info's series; s.mu is held.
func (s *Sampler) newSeries(info backend.Info) *series {
	s.phases++
	return &series{sid: info.SandboxID, thread: info.Thread, incarnation: info.Incarnation, info: info,
		phase: s.phases % metricsSlowEvery}
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	if !s.canMeasure() {
		return // nothing to measure with (kubernetes without Sandgate's server)
	}
	every(ctx, s.p.log, "metrics sampler", s.p.interval, s.Pass)
	s.mu.Lock()
	defer s.mu.Unlock()
	for sid, se := range s.series {
		se.close()
		delete(s.series, sid)
	}
}

// Pass takes one sample of every sandbox to sample.
func (s *Sampler) Pass(ctx context.Context) error {
	now := s.p.clock.Now()
	s.mu.Lock()
	s.passes++
	pass := s.passes
	_, cheap := s.p.backend.(backend.MeterOpener)
	slowDue := cheap || pass%metricsSlowEvery == 1
	serving := map[string]*Route{}
	s.p.cache.each(func(r *Route) {
		if !r.gone.Load() {
			serving[r.SandboxID] = r
		}
	})
	for sid, se := range s.series {
		r := serving[sid]
		if (r == nil || r.Incarnation != se.incarnation) && now.After(se.askedUntil) {
			se.close()
			delete(s.series, sid)
		}
	}
	for sid, r := range serving {
		if se := s.series[sid]; se == nil || se.incarnation != r.Incarnation {
			if se != nil {
				se.close()
			}
			info := backend.Info{SandboxID: sid, User: r.User, Thread: r.Thread, Incarnation: r.Incarnation,
				Backend: r.Backend, CreatedAt: r.CreatedAt}
			if r.url != nil {
				info.URL = r.url.String()
			}
			if len(r.key) == 1 { // the incarnation's own secret: a sandbox server's stats need it
				info.Secret = r.key[0]
			}
			s.series[sid] = s.newSeries(info)
		}
	}
	todo := make([]*series, 0, len(s.series))
	for _, se := range s.series {
		todo = append(todo, se)
	}
	s.mu.Unlock()
	s.measureDisks(ctx, now, todo)
	if !slowDue {
		return nil
	}
	if cheap {
		// One deadline for the pass: a cheap sample is file reads, and a
		// timer per sample would cost more than the reads.
		pctx, cancel := context.WithTimeout(ctx, s.sampleTimeout())
		for _, se := range todo {
			if se.opensFiles.Load() && (pass+se.phase)%metricsSlowEvery != 0 {
				continue
			}
			s.sample(pctx, se)
		}
		cancel()
	} else {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(metricsSlowConcurrency)
		for _, se := range todo {
			g.Go(func() error {
				sctx, cancel := context.WithTimeout(gctx, s.sampleTimeout())
				defer cancel()
				s.sample(sctx, se)
				return nil
			})
		}
		_ = g.Wait() // sample reports nothing: a failure is the sandbox's
	}
	s.dropFailed(todo, serving)
	return nil
}

// dropFailed drops the series that failed their sample and that this
// replica serves no request of: a sandbox destroyed (its cgroup gone)
// while a client watched it leaves the metrics at once, not when the ask
// runs out.
func (s *Sampler) dropFailed(sampled []*series, serving map[string]*Route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range sampled {
		if serving[se.sid] != nil || s.series[se.sid] != se {
			continue
		}
		se.mu.Lock()
		failed := se.failed > 0
		se.mu.Unlock()
		if failed {
			se.close()
			delete(s.series, se.sid)
		}
	}
}

// sample measures se once, appends the sample and sends it to watchers.
// A failure (the sandbox went meanwhile) drops the meter; a later pass
// opens a new one.
func (s *Sampler) sample(ctx context.Context, se *series) {
	se.mu.Lock()
	defer se.mu.Unlock()
	st, err := s.measure(ctx, se)
	if err != nil {
		if se.meter != nil {
			se.meter.Close()
			se.meter = nil
		}
		if se.failed++; se.failed == 1 {
			s.p.log.Debug("metrics sample failed", "sandbox_id", se.sid, "thread", se.thread, "backend", s.p.backendName, "err", err)
		}
		return
	}
	se.failed = 0
	if st.OOMKills > se.ooms && s.p.oomKilled != nil {
		// The first sample reports kills before it too (an allocation
		// that failed in the sandbox's first second); the report is
		// claimed by count, so a replica that starts sampling later, or
		// again, reports nothing twice.
		s.p.oomKilled(ctx, se.info, strconv.FormatInt(st.OOMKills, 10), st.OOMKills-se.ooms)
		se.ooms = st.OOMKills
	}
	cur := api.MetricsSample{At: st.At, CPUSeconds: st.CPUSeconds, MemoryBytes: st.MemoryBytes,
		MemoryPeakBytes: st.MemoryPeakBytes, MemoryLimitBytes: st.MemoryLimitBytes, PIDs: st.PIDs,
		DiskEgress: api.DiskEgress{DataBytes: se.disk.data, LayerBytes: se.disk.layer}}
	if s.p.meters.Egress != nil {
		cur.EgressSentBytes, cur.EgressReceivedBytes, _ = s.p.meters.Egress(se.sid)
	}
	if prev, ok := se.latest(); ok {
		if dt := cur.At.Sub(prev.At).Seconds(); dt > 0 {
			// max 0: a v1 process-tree sum drops the CPU of processes that
			// exited, so it can go backwards.
			pct := max(0, (cur.CPUSeconds-prev.CPUSeconds)/dt*100)
			cur.CPUPercent = &pct
		}
	}
	se.ring[se.next] = cur
	se.next = (se.next + 1) % metricsHistory
	se.n = min(se.n+1, metricsHistory)
	for ch := range se.watches {
		select {
		case ch <- cur:
		default: // a slow reader misses a sample rather than stall the pass
		}
	}
}

func (s *Sampler) measure(ctx context.Context, se *series) (backend.Stats, error) {
	if mo, ok := s.p.backend.(backend.MeterOpener); ok {
		if se.meter == nil {
			m, err := mo.OpenMeter(ctx, se.info)
			if err != nil {
				return backend.Stats{}, err
			}
			se.meter = m
			o, ok := m.(filesOpener)
			se.opensFiles.Store(ok && o.OpensFiles())
		}
		return se.meter.Sample(ctx)
	}
	st, ok := s.p.backend.(backend.Statter)
	if !ok {
		return backend.Stats{}, errNoMeasure
	}
	return st.Stats(ctx, se.info)
}

// filesOpener is a meter that may open its files for each sample (the
// process backend's past its budget of held files): about ten times a
// held meter's CPU, so it samples every metricsSlowEvery intervals, as a
// backend with no cheap meter does. At 5,000 sandboxes and a file limit
// of 20,000, sampling each of them every second took half a core.
type filesOpener interface{ OpensFiles() bool }

// errNoMeasure: the backend cannot measure its sandboxes.
var errNoMeasure = backend.Unsupported("metrics", "the backend cannot measure its sandboxes (kubernetes: set kubernetes_server to run Sandgate's server, which measures itself)")

// canMeasure says whether the backend can measure its sandboxes at all.
func (s *Sampler) canMeasure() bool {
	_, meters := s.p.backend.(backend.MeterOpener)
	_, stats := s.p.backend.(backend.Statter)
	return meters || stats
}

// close releases se's meter and ends its watches.
func (se *series) close() {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.meter != nil {
		se.meter.Close()
		se.meter = nil
	}
	for ch := range se.watches {
		close(ch)
	}
	se.watches = nil
}

// track returns info's series, sampled from now on for metricsAskedFor
// even if this replica serves it nothing; a new one is sampled at once,
// so a first ask sees a sample.
func (s *Sampler) track(ctx context.Context, info backend.Info) *series {
	s.mu.Lock()
	se := s.series[info.SandboxID]
	fresh := se == nil || se.incarnation != info.Incarnation
	if fresh {
		if se != nil {
			se.close()
		}
		se = s.newSeries(info)
		s.series[info.SandboxID] = se
	}
	se.askedUntil = s.p.clock.Now().Add(metricsAskedFor)
	s.mu.Unlock()
	if fresh {
		sctx, cancel := context.WithTimeout(ctx, s.sampleTimeout())
		s.sample(sctx, se)
		cancel()
	}
	return se
}

// Metrics is info's sandbox's latest sample and history, oldest first.
func (s *Sampler) Metrics(ctx context.Context, info backend.Info) (api.SandboxMetrics, error) {
	if !s.canMeasure() {
		return api.SandboxMetrics{}, errNoMeasure
	}
	se := s.track(ctx, info)
	out := api.SandboxMetrics{SandboxID: info.SandboxID, Thread: info.Thread, Backend: s.p.backendName,
		IntervalSeconds: s.sampleEvery(se).Seconds()}
	se.mu.Lock()
	defer se.mu.Unlock()
	out.History = make([]api.MetricsSample, 0, se.n)
	for i := se.n; i > 0; i-- {
		out.History = append(out.History, se.ring[(se.next+metricsHistory-i)%metricsHistory])
	}
	if se.n > 0 {
		latest := out.History[se.n-1]
		out.Latest = &latest
	}
	return out, nil
}

// Watch sends info's sandbox's samples from now on; the channel closes
// when the sandbox is no longer sampled here. stop ends the watch (and
// keeps the sandbox sampled meanwhile).
func (s *Sampler) Watch(ctx context.Context, info backend.Info) (samples <-chan api.MetricsSample, stop func(), err error) {
	if !s.canMeasure() {
		return nil, nil, errNoMeasure
	}
	se := s.track(ctx, info)
	ch := make(chan api.MetricsSample, metricsWatchBuffer)
	se.mu.Lock()
	if se.watches == nil {
		se.watches = map[chan api.MetricsSample]struct{}{}
	}
	se.watches[ch] = struct{}{}
	se.mu.Unlock()
	return ch, func() {
		se.mu.Lock()
		if _, ok := se.watches[ch]; ok {
			delete(se.watches, ch)
			close(ch)
		}
		se.mu.Unlock()
	}, nil
}

// KeepWatching extends the sampling of a watched sandbox (a stream calls
// it on each sample, so a long stream outlives metricsAskedFor).
func (s *Sampler) KeepWatching(sid string) {
	s.mu.Lock()
	if se := s.series[sid]; se != nil {
		se.askedUntil = s.p.clock.Now().Add(metricsAskedFor)
	}
	s.mu.Unlock()
}

// sampleTimeout bounds a sample (the engine or a sandbox server may hang).
func (s *Sampler) sampleTimeout() time.Duration { return max(s.p.interval, 2*time.Second) }

// sampleEvery is how often se gets a sample.
func (s *Sampler) sampleEvery(se *series) time.Duration {
	if _, ok := s.p.backend.(backend.MeterOpener); ok && !se.opensFiles.Load() {
		return s.p.interval
	}
	return s.p.interval * metricsSlowEvery
}

// Latest is sid's latest sample if this replica samples it; it starts
// no sampling (the operator's stats take their disk and egress figures
// from it).
func (s *Sampler) Latest(sid string) (api.MetricsSample, bool) {
	s.mu.Lock()
	se := s.series[sid]
	s.mu.Unlock()
	if se == nil {
		return api.MetricsSample{}, false
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	return se.latest()
}

// latest is se's newest sample; se.mu held.
func (se *series) latest() (api.MetricsSample, bool) {
	if se.n == 0 {
		return api.MetricsSample{}, false
	}
	return se.ring[(se.next+metricsHistory-1)%metricsHistory], true
}

// Usage is the latest sample of every sandbox sampled here, for the
// Prometheus collector (telemetry.Metrics.WatchSandboxes).
func (s *Sampler) Usage() []telemetry.SandboxUsage {
	s.mu.Lock()
	all := make([]*series, 0, len(s.series))
	for _, se := range s.series {
		all = append(all, se)
	}
	s.mu.Unlock()
	out := make([]telemetry.SandboxUsage, 0, len(all))
	for _, se := range all {
		se.mu.Lock()
		if l, ok := se.latest(); ok {
			u := telemetry.SandboxUsage{SandboxID: se.sid, MemoryBytes: l.MemoryBytes, PIDs: l.PIDs,
				DataBytes: l.DataBytes, LayerBytes: l.LayerBytes, EgressSentBytes: l.EgressSentBytes,
				EgressReceivedBytes: l.EgressReceivedBytes}
			if l.CPUPercent != nil {
				u.CPUCores = *l.CPUPercent / 100
			}
			out = append(out, u)
		}
		se.mu.Unlock()
	}
	return out
}
