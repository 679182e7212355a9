package usage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/sandgate/sandgate/internal/backend"
)

// DefaultTTL is how long a measurement is served before the next walk.
const DefaultTTL = 30 * time.Second

// Config configures a Meter.
type Config struct {
	// DataDir is the gateway's data_dir: thread data is under
	// backend.ThreadDir(DataDir, user, thread).
	DataDir string
	// Quota is thread_data_quota in bytes; 0 = none.
	Quota  int64
	TTL    time.Duration // default DefaultTTL
	Bounds Bounds
	Log    *slog.Logger
}

// Meter measures threads' data and caches each measurement for TTL. One
// walk per thread runs at a time, whoever asks.
type Meter struct {
	cfg   Config
	mu    sync.RWMutex
	cache map[key]Usage
	swept time.Time // the last sweep of stale entries
	// refreshing are the threads with a background walk started by Cached.
	refreshing map[key]struct{}
	walks      singleflight.Group
}

type key struct{ user, thread string }

// sweepAt is the cache size past which stale entries are dropped, so
// threads measured once do not stay in memory forever.
const sweepAt = 4096

// New returns a Meter.
func New(cfg Config) *Meter {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Meter{cfg: cfg, cache: map[key]Usage{}, refreshing: map[key]struct{}{}}
}

// Quota is the configured quota in bytes; 0 = none.
func (m *Meter) Quota() int64 { return m.cfg.Quota }

// Measure returns the thread's usage: the cached one while fresh, else a
// new walk, shared with every concurrent caller. The walk is bounded by
// Bounds, not by ctx: a caller that leaves does not waste the others' walk.
func (m *Meter) Measure(ctx context.Context, user, thread string) (Usage, error) {
	return m.MeasureWithin(ctx, user, thread, m.cfg.TTL)
}

// MeasureWithin is Measure with a measurement at most maxAge old (the
// metrics sampler's, fresher than TTL); its walk refreshes the cache for
// every other caller too.
func (m *Meter) MeasureWithin(ctx context.Context, user, thread string, maxAge time.Duration) (Usage, error) {
	k := key{user, thread}
	if u, ok := m.lookup(k); ok && time.Since(u.MeasuredAt) < maxAge {
		return u, nil
	}
	ch := m.walks.DoChan(user+"/"+thread, func() (any, error) {
		// A walk that ended between the lookup above and here has left a
		// fresh entry: the singleflight key is gone once a walk returns,
		// so without this check a late caller walks again.
		if u, ok := m.lookup(k); ok && time.Since(u.MeasuredAt) < maxAge {
			return u, nil
		}
		return m.walk(context.WithoutCancel(ctx), k)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Usage{}, r.Err
		}
		return r.Val.(Usage), nil
	case <-ctx.Done():
		return Usage{}, ctx.Err()
	}
}

// Cached is the hot path's view: the last measurement, however old, and
// whether there is one. It never walks: a missing or stale entry starts a
// walk in the background, whose result later calls see.
func (m *Meter) Cached(user, thread string) (Usage, bool) {
	k := key{user, thread}
	u, ok := m.lookup(k)
	if !ok || time.Since(u.MeasuredAt) >= m.cfg.TTL {
		m.refresh(k)
	}
	return u, ok
}

// refresh starts one background walk of k unless one is already running.
func (m *Meter) refresh(k key) {
	m.mu.Lock()
	_, busy := m.refreshing[k]
	m.refreshing[k] = struct{}{}
	m.mu.Unlock()
	if busy {
		return
	}
	go func() {
		if _, err := m.Measure(context.Background(), k.user, k.thread); err != nil {
			m.cfg.Log.Warn("measure thread data", "user", k.user, "thread", k.thread, "err", err)
		}
		m.mu.Lock()
		delete(m.refreshing, k)
		m.mu.Unlock()
	}()
}

func (m *Meter) lookup(k key) (Usage, bool) {
	m.mu.RLock()
	u, ok := m.cache[k]
	m.mu.RUnlock()
	return u, ok
}

func (m *Meter) walk(ctx context.Context, k key) (any, error) {
	u, err := Measure(ctx, backend.ThreadDir(m.cfg.DataDir, k.user, k.thread), m.cfg.Bounds)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	// At most one sweep a TTL: with more threads than sweepAt, all fresh,
	// a sweep per walk made every pass of the sampler's disk walks
	// quadratic (5,000 threads: 25 M clock reads every 5 s).
	if now := time.Now(); len(m.cache) >= sweepAt && now.Sub(m.swept) >= m.cfg.TTL {
		m.swept = now
		for old, v := range m.cache {
			if now.Sub(v.MeasuredAt) >= m.cfg.TTL {
				delete(m.cache, old)
			}
		}
	}
	m.cache[k] = u
	m.mu.Unlock()
	return u, nil
}
