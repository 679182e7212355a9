package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// The prewarm pool: Config.Prewarm sandboxes started before any thread
// asks, fleet-wide, so a new thread's first request skips the create. They
// have no user or thread (state prewarm, index {p}prewarm), count in
// capacity, are evicted first when it is full, and get their identity at
// claim time: the thread's sandbox id, labels and user data (their data dir
// is renamed to the thread's, beneath the running bind mounts). Only
// backends that bind host dirs and can rename a running sandbox implement
// backend.Binder (process, docker, kubernetes).

// prewarmLock is the lock id (not a sandbox id) of the fleet's refill: one
// replica at a time tops the pool up, so replicas never overshoot it.
const prewarmLock = "prewarm-refill"

// prewarmInterval is how often the pool is checked when nothing was claimed
// (a claim wakes the refill).
const prewarmInterval = 5 * time.Second

// refillDelay is how long the refill waits after a claim: a sandbox start
// takes tens of milliseconds of CPU, which would otherwise compete with the
// claimed thread's first requests for the same cores (it doubled their
// latency on 2 cores).
const refillDelay = 250 * time.Millisecond

// Prewarmer keeps the prewarm pool at Config.Prewarm sandboxes, shared
// among the templates by their recent claims (demand.go).
type Prewarmer struct {
	p      prewarmerParams
	demand *demand
}

type prewarmerParams struct {
	size                   int               // Config.Prewarm, the total
	templates              []Template        // Config.prewarmTemplates
	fps                    map[string]string // prewarmFingerprint by template name
	canBind                bool              // the backend can hand a pre-started sandbox out (backend.Binder)
	recipe                 recipe
	maxSandboxes           int
	createTimeout, lockTTL time.Duration
	backend                prewarmBackend
	backendName            string
	store                  prewarmStore
	// destroy destroys a surplus or stale pre-started sandbox (Pool.Destroy).
	destroy func(ctx context.Context, sid string, reason DestroyReason) error
	locks   locks
	// refill is a claim's wake-up call.
	refill  <-chan struct{}
	metrics *telemetry.Metrics
	clock   Clock
	log     *slog.Logger
}

// prewarmBackend starts a pre-started sandbox, and destroys one that was
// not recorded.
type prewarmBackend interface {
	Create(ctx context.Context, spec backend.Spec) (backend.Info, error)
	Destroy(ctx context.Context, info backend.Info) error
}

// prewarmStore lists, reserves and records pre-started sandboxes.
type prewarmStore interface {
	PrewarmRecords(ctx context.Context) ([]state.Record, error)
	Reserve(ctx context.Context, req state.ReserveRequest) (state.ReserveResult, error)
	Unreserve(ctx context.Context, sid, user string) error
	PutPrewarm(ctx context.Context, rec state.Record, now time.Time) (bool, error)
	PrewarmClaims(ctx context.Context) (map[string]int64, error)
}

func newPrewarmer(p prewarmerParams) *Prewarmer {
	return &Prewarmer{p: p, demand: newDemand(p.templates, p.fps)}
}

// Run refills every prewarmInterval and refillDelay after a claim until ctx ends;
// it returns at once when the pool is off or the backend cannot claim.
func (w *Prewarmer) Run(ctx context.Context) {
	if w.p.size <= 0 || !w.p.canBind {
		if w.p.size > 0 {
			w.p.log.Warn("prewarm is set but this backend cannot hand out pre-started sandboxes: no prewarm pool", "prewarm", w.p.size)
		}
		return
	}
	t := time.NewTicker(prewarmInterval)
	defer t.Stop()
	for {
		if err := runPass(ctx, prewarmInterval, w.Pass); err != nil && ctx.Err() == nil {
			w.p.log.Warn("prewarm pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.p.refill:
			select {
			case <-ctx.Done():
				return
			case <-time.After(refillDelay):
			}
		}
	}
}

// Pass tops each template's share of the pool up (demand.targets), and
// destroys the sandboxes over it or made from another configuration
// (fingerprint), oldest first. Another replica refilling right now makes
// it a no-op.
func (w *Prewarmer) Pass(ctx context.Context) error {
	p := w.p
	held, err := p.locks.lock(ctx, prewarmLock, 0)
	if errors.Is(err, state.ErrLocked) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	defer p.locks.unlock(held)
	recs, err := p.store.PrewarmRecords(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	claims, err := p.store.PrewarmClaims(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	w.demand.observe(claims, p.clock.Now())
	want := w.demand.targets(p.size)
	// A template's sandboxes over its share stay until another template
	// needs the room (oldest first): demand moves the shares, but a ready
	// sandbox is not thrown away while the total has room for it. Those of
	// no current template go at once.
	kept := make(map[string]int, len(want))
	var surplus []state.Record
	for _, rec := range recs {
		_, current := want[rec.Prewarm]
		switch {
		case kept[rec.Prewarm] < want[rec.Prewarm]:
			kept[rec.Prewarm]++
		case current:
			surplus = append(surplus, rec)
		default:
			w.trim(ctx, rec)
		}
	}
	deficit, room := 0, p.size-len(surplus)
	for fp, n := range want {
		deficit += max(n-kept[fp], 0)
		room -= kept[fp]
	}
	for ; len(surplus) > 0 && room < deficit; room++ {
		w.trim(ctx, surplus[0])
		surplus = surplus[1:]
	}
	// The template furthest below its share first, one at a time, so that
	// a slow template does not keep the others' shares empty.
	for {
		var next Template
		short := 0
		for _, t := range p.templates {
			if d := want[p.fps[t.Name]] - kept[p.fps[t.Name]]; d > short {
				next, short = t, d
			}
		}
		if short == 0 {
			return nil
		}
		select {
		case <-held.Lost():
			return nil
		default:
		}
		fp := p.fps[next.Name]
		full, err := w.prewarmOne(ctx, next, fp)
		if err != nil || full {
			return err
		}
		kept[fp]++
	}
}

// trim destroys a pre-started sandbox over its template's share or made
// from another configuration.
func (w *Prewarmer) trim(ctx context.Context, rec state.Record) {
	if err := w.p.destroy(ctx, rec.SandboxID, ReasonPrewarmTrim); err != nil && !errors.Is(err, ErrNotFound) {
		w.p.log.WarnContext(ctx, "prewarm: destroy surplus", "sandbox_id", rec.SandboxID, "err", err)
	}
}

// prewarmOne starts one unclaimed sandbox in free capacity; full reports
// that there was none (the pool never evicts for its own refill).
func (w *Prewarmer) prewarmOne(ctx context.Context, t Template, fp string) (full bool, err error) {
	p := w.p
	sid, err := newPrewarmID()
	if err != nil {
		return false, err
	}
	now := p.clock.Now()
	res, err := p.store.Reserve(ctx, state.ReserveRequest{SandboxID: sid, Max: max(p.maxSandboxes, 0),
		Kind: state.KindPrewarm, Now: now, Deadline: now.Add(p.createTimeout + p.lockTTL)})
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrState, err)
	}
	if res.Outcome != "ok" {
		return true, nil
	}
	info, err := w.startPrewarm(ctx, sid, t, fp)
	if err == nil {
		rec := state.RecordFromInfo(info, state.StatePrewarm)
		rec.User, rec.Thread, rec.Prewarm = "", "", fp
		if rec.Backend == "" {
			rec.Backend = p.backendName
		}
		_, err = p.store.PutPrewarm(ctx, rec, p.clock.Now())
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	if err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = p.store.Unreserve(uctx, sid, "")
		if info.Incarnation != "" {
			_ = p.backend.Destroy(uctx, info)
		}
		_ = backend.RemovePrewarmDirs(p.recipe.mounts.DataDir, sid)
		return false, fmt.Errorf("prewarm sandbox %s: %w", sid, err)
	}
	p.log.InfoContext(ctx, "prewarmed sandbox ready", "sandbox_id", sid, "template", t.Name)
	return false, nil
}

// startPrewarm creates sid with the spec every sandbox of t gets, less a
// thread.
func (w *Prewarmer) startPrewarm(ctx context.Context, sid string, t Template, fp string) (backend.Info, error) {
	p := w.p
	mounts, err := backend.PrewarmMounts(p.recipe.mounts, sid)
	if err != nil {
		return backend.Info{}, err
	}
	secret, err := newSecret()
	if err != nil {
		return backend.Info{}, err
	}
	spec := p.recipe.apply(backend.Spec{SandboxID: sid, Mounts: mounts, Secret: secret}, t, Options{}, backend.Egress{}, false)
	spec.Labels[backend.LabelPrewarm] = fp
	cctx, cancel := context.WithTimeout(ctx, p.createTimeout)
	defer cancel()
	info, err := p.backend.Create(cctx, spec)
	p.metrics.Created(err == nil)
	return info, err
}

// newPrewarmID is a random sandbox id: no thread's id formula makes it.
func newPrewarmID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("prewarm sandbox id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
