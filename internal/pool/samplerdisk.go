package pool

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/backend"
)

// SamplerMeters measure for the Sampler what a backend does not; a nil
// field measures nothing.
type SamplerMeters struct {
	// ThreadDisk is the bytes of user's thread's data, from a walk at most
	// maxAge old (usage.Meter.MeasureWithin, whose cache the quota check
	// reads too).
	ThreadDisk func(ctx context.Context, user, thread string, maxAge time.Duration) (int64, error)
	// Egress is what sandboxID sent and received through the egress proxy
	// (egress.Proxy.Traffic: two atomic loads); ok false when the proxy
	// serves it nothing.
	Egress func(sandboxID string) (sent, received int64, ok bool)
}

// diskFigures are a sandbox's last disk measurement.
type diskFigures struct {
	data  int64 // the thread's data
	layer int64 // its writable layer, where it has one
}

// metricsDiskConcurrency bounds the walks (and engine asks) of a disk pass:
// they are disk reads, which more of at once would only queue.
const metricsDiskConcurrency = 2

// measureDisks starts a disk pass over the series of todo last measured
// metricsDiskEvery intervals ago or more (a new one at once), unless one
// is still running: a walk must not hold up the samples, and a slow disk
// gets fewer passes, not more at once.
func (s *Sampler) measureDisks(ctx context.Context, now time.Time, todo []*series) {
	layers, _ := s.p.backend.(backend.LayerMeter)
	if s.p.meters.ThreadDisk == nil && layers == nil {
		return
	}
	every := s.p.interval * metricsDiskEvery
	var due []*series
	for _, se := range todo {
		se.mu.Lock()
		if now.Sub(se.diskAt) >= every {
			due = append(due, se)
		}
		se.mu.Unlock()
	}
	if len(due) == 0 || !s.disking.CompareAndSwap(false, true) {
		return
	}
	// Not the pass's context, which ends with the pass: each measure has
	// a timeout of its own.
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer s.disking.Store(false)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(metricsDiskConcurrency)
		for _, se := range due {
			g.Go(func() error {
				defer func() {
					if v := recover(); v != nil { // not in a pass: runPass would not catch it
						s.p.log.Error("metrics disk measure panicked", "sandbox_id", se.sid, "thread", se.thread, "panic", v)
					}
				}()
				s.measureDisk(gctx, se, layers, now, every)
				return nil
			})
		}
		_ = g.Wait() // measureDisk reports nothing: a failure is the sandbox's
	}()
}

// measureDisk measures se's disk once; a figure that fails keeps the last
// one (the sandbox went meanwhile: its series goes with it).
func (s *Sampler) measureDisk(ctx context.Context, se *series, layers backend.LayerMeter, now time.Time, every time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max(every, s.sampleTimeout()))
	defer cancel()
	se.mu.Lock()
	info, d := se.info, se.disk
	se.mu.Unlock()
	if s.p.meters.ThreadDisk != nil {
		// every/2: a walk the quota check made since the last pass is
		// fresh enough.
		if n, err := s.p.meters.ThreadDisk(ctx, info.User, info.Thread, every/2); err == nil {
			d.data = n
		} else {
			s.p.log.Debug("thread data measure failed", "sandbox_id", info.SandboxID, "thread", info.Thread, "backend", s.p.backendName, "err", err)
		}
	}
	if layers != nil {
		if n, ok, err := layers.LayerBytes(ctx, info); err == nil {
			d.layer = 0 // none (an image without a layer)
			if ok {
				d.layer = n
			}
		} else {
			s.p.log.Debug("layer measure failed", "sandbox_id", info.SandboxID, "thread", info.Thread, "backend", s.p.backendName, "err", err)
		}
	}
	se.mu.Lock()
	se.disk, se.diskAt = d, now
	se.mu.Unlock()
}
