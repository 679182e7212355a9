package pool

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
)

// The prewarm pool: Config.Prewarm sandboxes started before any thread
// asks, fleet-wide, so a new thread's first request skips the create. They
// have no user or thread (state prewarm, index {p}prewarm), count in
// capacity, are evicted first when it is full, and get their identity at
// claim time: the thread's sandbox id, labels and user data (their data dir
// is renamed to the thread's, beneath the running bind mounts). Only
// backends that bind host dirs and can rename a running sandbox implement
// backend.Claimer (process, docker).

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

// Prewarmer keeps the prewarm pool at Config.Prewarm sandboxes.
type Prewarmer struct{ p *Pool }

// NewPrewarmer returns the refill loop of p.
func NewPrewarmer(p *Pool) *Prewarmer { return &Prewarmer{p: p} }

// Run refills every prewarmInterval and refillDelay after a claim until ctx ends;
// it returns at once when the pool is off or the backend cannot claim.
func (w *Prewarmer) Run(ctx context.Context) {
	if !w.p.prewarmOn() {
		if w.p.cfg.Prewarm > 0 {
			w.p.log.Warn("prewarm is set but this backend cannot hand out pre-started sandboxes: no prewarm pool", "prewarm", w.p.cfg.Prewarm)
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

// Pass tops the pool up to Config.Prewarm, and destroys the sandboxes over
// it or made from another configuration (fingerprint), oldest first. Another
// replica refilling right now makes it a no-op.
func (w *Prewarmer) Pass(ctx context.Context) error {
	p := w.p
	held, err := p.lock(ctx, prewarmLock, 0)
	if errors.Is(err, state.ErrLocked) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	defer p.unlock(held)
	recs, err := p.store.PrewarmRecords(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	kept := 0
	for _, rec := range recs {
		if rec.Prewarm == p.prewarmFP && kept < p.cfg.Prewarm {
			kept++
			continue
		}
		if err := p.destroy(ctx, rec.SandboxID, nil, ReasonPrewarmTrim); err != nil && !errors.Is(err, ErrNotFound) {
			p.log.WarnContext(ctx, "prewarm: destroy surplus", "sandbox_id", rec.SandboxID, "err", err)
		}
	}
	for ; kept < p.cfg.Prewarm; kept++ {
		select {
		case <-held.Lost():
			return nil
		default:
		}
		full, err := p.prewarmOne(ctx)
		if err != nil || full {
			return err
		}
	}
	return nil
}

// prewarmOne starts one unclaimed sandbox in free capacity; full reports
// that there was none (the pool never evicts for its own refill).
func (p *Pool) prewarmOne(ctx context.Context) (full bool, err error) {
	sid, err := newPrewarmID()
	if err != nil {
		return false, err
	}
	now := p.clock.Now()
	res, err := p.store.Reserve(ctx, state.ReserveRequest{SandboxID: sid, Max: max(p.cfg.MaxSandboxes, 0),
		Kind: state.KindPrewarm, Now: now, Deadline: now.Add(p.cfg.CreateTimeout + p.cfg.LockTTL)})
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrState, err)
	}
	if res.Outcome != "ok" {
		return true, nil
	}
	info, err := p.startPrewarm(ctx, sid)
	if err == nil {
		rec := state.RecordFromInfo(info, state.StatePrewarm)
		rec.User, rec.Thread, rec.Prewarm = "", "", p.prewarmFP
		if rec.Backend == "" {
			rec.Backend = p.name
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
		_ = backend.RemovePrewarmDirs(p.cfg.Mounts.DataDir, sid)
		return false, fmt.Errorf("prewarm sandbox %s: %w", sid, err)
	}
	p.log.InfoContext(ctx, "prewarmed sandbox ready", "sandbox_id", sid)
	return false, nil
}

// startPrewarm creates sid with the spec every sandbox gets, less a thread.
func (p *Pool) startPrewarm(ctx context.Context, sid string) (backend.Info, error) {
	mounts, err := backend.PrewarmMounts(p.cfg.Mounts, sid)
	if err != nil {
		return backend.Info{}, err
	}
	secret, err := newSecret()
	if err != nil {
		return backend.Info{}, err
	}
	spec := backend.Spec{SandboxID: sid, Mounts: mounts, Env: p.cfg.Env, Secret: secret, Egress: p.cfg.Egress}
	spec.Labels = backend.IdentityLabels(spec, p.cfg.Instance, p.cfg.Labels)
	spec.Labels[backend.LabelFleet] = p.cfg.Fleet
	spec.Labels[backend.LabelPrewarm] = p.prewarmFP
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
	defer cancel()
	info, err := p.backend.Create(cctx, spec)
	p.metrics.Created(err == nil)
	return info, err
}

// prewarmOn: a pool is configured and the backend can hand one out.
func (p *Pool) prewarmOn() bool {
	_, ok := p.backend.(backend.Claimer)
	return p.cfg.Prewarm > 0 && ok
}

// claimable reports whether a new thread may take a pre-started sandbox:
// the pool is on and the thread has no data of its own on the host. (One
// with an egress policy of its own is turned down by the reservation.)
func (p *Pool) claimable(user, thread string) bool {
	if !p.prewarmOn() {
		return false
	}
	unused, err := backend.ThreadDirUnused(p.cfg.Mounts.DataDir, user, thread)
	return err == nil && unused
}

// takePrewarm takes pre-started sandbox pw for sid (see statedb.TakePrewarm)
// under pw's lock, which it returns held: the reconciler must not adopt pw
// back while it is being claimed. ok is false when another replica got it.
func (p *Pool) takePrewarm(ctx context.Context, pw, sid, user string) (state.Record, *statedb.Held, bool, error) {
	held, err := p.lock(ctx, pw, 0)
	if errors.Is(err, state.ErrLocked) {
		return state.Record{}, nil, false, nil
	}
	if err != nil {
		return state.Record{}, nil, false, fmt.Errorf("%w: %w", ErrState, err)
	}
	rec, forget, ok, err := p.store.TakePrewarmRecord(ctx, pw, sid, user, p.clock.Now().Add(p.cfg.CreateTimeout+p.cfg.LockTTL))
	if err == nil && ok {
		err = afterAnswer(ctx, forget)
	}
	if err != nil || !ok {
		p.unlock(held)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrState, err)
		}
		return state.Record{}, nil, false, err
	}
	return rec, held, true, nil
}

// claim binds the taken pre-started sandbox rec to (user, thread, sid) and
// records it active. On an error rec's sandbox is destroyed and the caller
// creates one cold: sid's capacity reservation is already held.
func (p *Pool) claim(ctx context.Context, rec state.Record, held *statedb.Held, user, thread, sid string) (*Route, error) {
	defer p.unlockLater(held)
	defer func() {
		select {
		case p.refill <- struct{}{}:
		default:
		}
	}()
	pw := rec.SandboxID
	warm := rec.Info()
	r, err := p.bind(ctx, rec, user, thread, sid)
	if err != nil {
		p.log.WarnContext(ctx, "prewarmed sandbox not claimed; creating one", "sandbox_id", sid, "thread", thread,
			"prewarm_id", pw, "err", err)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.LockTTL)
		defer cancel()
		if derr := p.backend.Destroy(dctx, warm); derr != nil {
			p.log.WarnContext(ctx, "destroy unclaimed prewarmed sandbox", "sandbox_id", pw, "err", derr)
		}
		_ = backend.RemovePrewarmDirs(p.cfg.Mounts.DataDir, pw)
		p.metrics.Destroyed(string(ReasonPrewarmTrim))
	}
	return r, err
}

func (p *Pool) bind(ctx context.Context, rec state.Record, user, thread, sid string) (*Route, error) {
	if rec.Prewarm != p.prewarmFP {
		return nil, errors.New("made from another configuration")
	}
	claimer, _ := p.backend.(backend.Claimer)
	mounts, err := backend.ThreadMounts(p.cfg.Mounts, user, thread)
	if err != nil {
		return nil, err
	}
	if err := backend.AdoptPrewarmDirs(p.cfg.Mounts.DataDir, rec.SandboxID, user, thread); err != nil {
		return nil, err
	}
	spec := backend.Spec{SandboxID: sid, User: user, Thread: thread, Mounts: mounts, Env: p.cfg.Env,
		Secret: rec.Secret, Egress: p.cfg.Egress}
	spec.Labels = backend.IdentityLabels(spec, p.cfg.Instance, p.cfg.Labels)
	spec.Labels[backend.LabelFleet] = p.cfg.Fleet
	ctx, span := p.span(ctx, spanClaim, sid, thread)
	info, err := claimer.Claim(ctx, rec.Info(), spec)
	end(span, err)
	if err != nil {
		return nil, err
	}
	return p.record(ctx, info, user, thread)
}

// prewarmFingerprint identifies what a sandbox is made from besides its
// thread: a pre-started sandbox made from another one is never claimed.
func prewarmFingerprint(cfg Config, backendName string) string {
	b, _ := json.Marshal(struct {
		Backend, Fleet, Skills, ACP string
		Extra                       []backend.Mount
		Env, Labels                 map[string]string
		Egress                      backend.Egress
	}{backendName, cfg.Fleet, cfg.Mounts.SkillsDir, cfg.Mounts.ACPWorkspace, cfg.Mounts.Extra, cfg.Env, cfg.Labels, cfg.Egress})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// newPrewarmID is a random sandbox id: no thread's id formula makes it.
func newPrewarmID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("prewarm sandbox id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
