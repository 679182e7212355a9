// Package pool hands out sandboxes: acquire (replica cache, then Redis, then
// lock + discover + create), release to the warm pool, destroy, and the
// background loops that keep the fleet-wide pool honest (touch flush, idle
// reaper, reconciler). All shared state lives in Redis through statedb.Store.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Clock is injected so tests move time without sleeping.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Outcome says how an acquire was served.
type Outcome string

const (
	OutcomeHit     Outcome = "hit"     // cached here, or active in Redis
	OutcomeWarm    Outcome = "warm"    // reclaimed from the warm pool
	OutcomeCold    Outcome = "cold"    // created
	OutcomeAdopted Outcome = "adopted" // found running without a record
	OutcomePrewarm Outcome = "prewarm" // a pre-started sandbox, claimed
	OutcomeThawed  Outcome = "thawed"  // frozen while idle, thawed for this request
)

// Deps are the pool's collaborators.
type Deps struct {
	Store   *statedb.Store
	Backend backend.Backend
	// BackendName is recorded in records and logs.
	BackendName string
	// NewTransport returns the connection pool for one sandbox incarnation;
	// socket is its Unix socket ("" = a TCP sandbox, dialled by URL host).
	NewTransport func(socket string) http.RoundTripper
	Clock        Clock
	Log          *slog.Logger
	// Tracer starts the root spans of background passes (reaper,
	// reconciler); nil = tracing off. Spans under a request need no tracer:
	// they continue the request's.
	Tracer trace.Tracer
	// Metrics records pool events; nil = none.
	Metrics *telemetry.Metrics
	// Creates limits how often a user may have a sandbox created; nil = no
	// limit. Only real creates count: cache hits, warm reclaims and
	// adoptions do not.
	Creates CreateLimiter
	// NewThread admits a thread that is about to get a sandbox (a create or
	// a claimed warm one) and so its data on the host: an error refuses
	// the acquire (checkpoint.Threads.AdmitThread: the per-user bound on
	// threads with data). nil = none.
	NewThread func(ctx context.Context, user, thread string) error
	// Events receives lifecycle events (queued, starting, pulling, ready,
	// failed, released, destroyed); nil = none.
	Events Publisher
	// FailReason is what a Failed event says of err: what a client may be
	// told (the router's error table), never a host path or a secret.
	// nil = "failed".
	FailReason func(error) string
}

// CreateLimiter decides whether user may have one more sandbox created now,
// fleet-wide, and if not, how long until it may (statedb.CreateRate).
type CreateLimiter interface {
	AllowCreate(ctx context.Context, user string) (retryAfter time.Duration, ok bool, err error)
}

// Pool is one replica's view of the fleet-wide sandbox pool.
type Pool struct {
	cfg     Config
	store   *statedb.Store
	locker  *statedb.Locker
	backend backend.Backend
	name    string
	newRT   func(socket string) http.RoundTripper
	clock   Clock
	log     *slog.Logger
	cache   *cache
	flight  singleflight.Group
	tracer  trace.Tracer
	metrics *telemetry.Metrics
	creates CreateLimiter
	// newThread is Deps.NewThread.
	newThread func(ctx context.Context, user, thread string) error
	events    Publisher
	// failReason: see Deps.FailReason.
	failReason func(error) string
	// prewarmFP fingerprints the spec of pre-started sandboxes; refill
	// wakes the Prewarmer after a claim.
	prewarmFP string
	refill    chan struct{}
	bg        background
	// owned are the buckets whose leases this replica holds (nil: no lease
	// loop runs, every bucket is this replica's); leaseToken names this
	// process in the leases, unique even if two replicas share an instance name.
	owned      atomic.Pointer[[]int]
	leaseToken string
}

// New returns a Pool; cfg must be valid.
func New(cfg Config, d Deps) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.Backend == nil {
		return nil, errors.New("pool: store and backend are required")
	}
	cfg = cfg.withDefaults()
	if d.Clock == nil {
		d.Clock = realClock{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.NewTransport == nil {
		d.NewTransport = func(socket string) http.RoundTripper {
			t := http.DefaultTransport.(*http.Transport).Clone()
			if socket != "" {
				t.DialContext = backend.DialUnix(socket, 2*time.Second)
			}
			return t
		}
	}
	return &Pool{
		cfg:     cfg,
		store:   d.Store,
		locker:  statedb.NewLocker(d.Store, cfg.LockTTL),
		backend: d.Backend,
		name:    d.BackendName,
		newRT:   d.NewTransport,
		clock:   d.Clock,
		log:     d.Log.With("backend", d.BackendName),
		cache:   newCache(),
		tracer:  d.Tracer,
		metrics: d.Metrics,
		creates: d.Creates,
		events:  d.Events,

		newThread: d.NewThread,

		failReason: d.FailReason,
		prewarmFP:  prewarmFingerprint(cfg, d.BackendName),
		refill:     make(chan struct{}, 1),
		leaseToken: cfg.Instance + "/" + strconv.FormatInt(time.Now().UnixNano(), 36),
	}, nil
}

// Config returns the effective configuration (defaults applied).
func (p *Pool) Config() Config { return p.cfg }

// Acquire returns the route of (user, thread)'s sandbox, creating it if
// needed. Concurrent acquires of one sandbox on this replica share one
// attempt; across replicas the sandbox lock makes exactly one create.
// user and thread must be validated.
func (p *Pool) Acquire(ctx context.Context, user, thread string) (*Route, Outcome, error) {
	start := time.Now()
	if r := p.cache.thread(user, thread, p.now(start)); r != nil {
		r.touched.Store(true)
		p.hit(ctx, r, start)
		return r, OutcomeHit, nil
	}
	ctx, span := p.startAcquire(ctx, user, thread)
	r, o, err := p.acquire(ctx, user, thread, false)
	p.acquired(span, start, o, err)
	return r, o, err
}

// now is the pool clock's time. With the real clock it is start itself: a
// clock read costs tens of nanoseconds, and the cached path already takes
// one for the acquire latency.
func (p *Pool) now(start time.Time) time.Time {
	if _, real := p.clock.(realClock); real {
		return start
	}
	return p.clock.Now()
}

// Reacquire is called after a dial-class failure against failed: the route
// is dropped and the sandbox's liveness verified, so a sandbox killed behind
// the gateway's back is recreated.
func (p *Pool) Reacquire(ctx context.Context, failed *Route) (*Route, Outcome, error) {
	start := time.Now()
	p.cache.drop(failed.SandboxID, failed)
	ctx, span := p.startAcquire(ctx, failed.User, failed.Thread)
	r, o, err := p.acquire(ctx, failed.User, failed.Thread, true)
	p.acquired(span, start, o, err)
	return r, o, err
}

type acquired struct {
	route   *Route
	outcome Outcome
}

func (p *Pool) acquire(ctx context.Context, user, thread string, verify bool) (*Route, Outcome, error) {
	sid := identity.SandboxID(user, thread)
	key := sid
	if verify {
		key += "/verify"
	}
	// The attempt runs detached from this request: a client that gives up
	// must not abort a create other requests wait for.
	ch := p.flight.DoChan(key, func() (any, error) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CreateTimeout+p.cfg.LockTTL)
		defer cancel()
		r, o, err := p.acquireSlow(actx, user, thread, sid, verify)
		if err != nil {
			p.failed(actx, user, thread, sid, err)
		}
		return acquired{r, o}, err
	})
	wait := time.NewTimer(p.cfg.ProvisionWait)
	defer wait.Stop()
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, "", res.Err
		}
		a := res.Val.(acquired)
		a.route.touched.Store(true)
		return a.route, a.outcome, nil
	case <-wait.C:
		return nil, "", fmt.Errorf("%w: still creating after %s", ErrProvisioning, p.cfg.ProvisionWait)
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// Owner decides who may reach a sandbox by id.
type Owner interface {
	Owns(user, thread string) bool
}

// Route returns the cached route of sid, or acquires it from its Redis
// record, for a caller who owns it. It never creates: an unknown sid is
// ErrNotFound, and so is a sandbox who does not own, which is then neither
// touched nor reclaimed from the warm pool.
func (p *Pool) Route(ctx context.Context, sid string, who Owner) (*Route, Outcome, error) {
	start := time.Now()
	if r := p.cache.sandbox(sid, p.now(start)); r != nil {
		if !who.Owns(r.User, r.Thread) {
			return nil, "", ErrNotFound
		}
		r.touched.Store(true)
		p.hit(ctx, r, start)
		return r, OutcomeHit, nil
	}
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying || !who.Owns(rec.User, rec.Thread) {
		return nil, "", ErrNotFound
	}
	if identity.SandboxID(rec.User, rec.Thread) != sid {
		return nil, "", p.conflict(ctx, rec, rec.User, rec.Thread)
	}
	ctx, span := p.startAcquire(ctx, rec.User, rec.Thread)
	r, o, err := p.acquire(ctx, rec.User, rec.Thread, false)
	p.acquired(span, start, o, err)
	return r, o, err
}

// Record returns the Redis record of sid.
func (p *Pool) Record(ctx context.Context, sid string) (state.Record, bool, error) {
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return rec, false, fmt.Errorf("%w: %w", ErrState, err)
	}
	return rec, ok, nil
}

// Release parks the thread's sandbox in the warm pool (paused, with
// PauseWarm and a backend that can).
func (p *Pool) Release(ctx context.Context, user, thread string) error {
	sid := identity.SandboxID(user, thread)
	pauser := p.pauser()
	if pauser != nil {
		// Pause and a concurrent reclaim's resume must not interleave.
		held, err := p.lock(ctx, sid, p.cfg.LockTTL)
		if err != nil {
			return lockErr(err)
		}
		defer p.unlock(held)
	}
	ok, err := p.store.Release(ctx, sid, user, thread, p.clock.Now())
	if errors.Is(err, state.ErrIdentity) {
		rec, _, _ := p.store.Get(ctx, sid)
		rec.SandboxID = sid
		return p.conflict(ctx, rec, user, thread)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	p.cache.drop(sid, nil)
	if !ok {
		return ErrNotFound
	}
	if pauser != nil {
		if rec, found, err := p.store.Get(ctx, sid); err == nil && found {
			if err := pauser.Pause(ctx, rec.Info()); err != nil {
				p.log.WarnContext(ctx, "pause warm sandbox", "sandbox_id", sid, "thread", thread, "err", err)
			}
		}
	}
	p.log.InfoContext(ctx, "sandbox released to warm pool", "sandbox_id", sid, "thread", thread)
	p.publish(ctx, events.Released, sid, user, thread, "")
	return nil
}

// pauser is the backend's Pauser when warm sandboxes are to be paused.
func (p *Pool) pauser() backend.Pauser {
	if !p.cfg.PauseWarm {
		return nil
	}
	pz, _ := p.backend.(backend.Pauser)
	return pz
}

// lockErr maps a lock failure: held elsewhere is "provisioning", anything
// else is Redis.
func lockErr(err error) error {
	if errors.Is(err, state.ErrLocked) {
		return fmt.Errorf("%w: %w", ErrProvisioning, err)
	}
	return fmt.Errorf("%w: %w", ErrState, err)
}

// Destroy destroys sid now, whatever its state. ErrNotFound if unknown.
func (p *Pool) Destroy(ctx context.Context, sid string, reason DestroyReason) error {
	return p.destroy(ctx, sid, nil, reason)
}

// DestroyThread destroys the sandbox of (user, thread) now, only if its
// record is theirs (ErrIdentityConflict otherwise).
func (p *Pool) DestroyThread(ctx context.Context, user, thread string, reason DestroyReason) error {
	return p.destroy(ctx, identity.SandboxID(user, thread), func(rec state.Record) error {
		if rec.User != user || rec.Thread != thread {
			return p.conflict(ctx, rec, user, thread)
		}
		return nil
	}, reason)
}

// destroy claims and destroys sid under its lock; check, when set, vets the
// record first (records change identity only under the lock).
func (p *Pool) destroy(ctx context.Context, sid string, check func(state.Record) error, reason DestroyReason) error {
	held, err := p.lock(ctx, sid, p.cfg.LockTTL)
	if err != nil {
		return lockErr(err)
	}
	defer p.unlock(held)
	incarnation := ""
	if check != nil {
		rec, ok, err := p.store.Get(ctx, sid)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		if !ok {
			return ErrNotFound
		}
		if err := check(rec); err != nil {
			return err
		}
		incarnation = rec.Incarnation
	}
	rec, ok, err := p.store.Claim(ctx, sid, incarnation)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok {
		return ErrNotFound
	}
	return p.destroyClaimed(ctx, rec, reason)
}

// destroyClaimed destroys a claimed record's sandbox and deletes the record.
// The caller holds the sandbox's lock.
func (p *Pool) destroyClaimed(ctx context.Context, rec state.Record, reason DestroyReason) error {
	p.cache.drop(rec.SandboxID, nil)
	if err := p.destroyBackend(ctx, rec); err != nil {
		// The record stays in state destroying; the reconciler or the next
		// acquire (under the lock) finishes the job.
		return fmt.Errorf("destroy sandbox: %w", err)
	}
	if _, err := p.store.Forget(ctx, rec.SandboxID, rec.Incarnation); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if rec.Prewarm != "" && rec.User == "" { // never claimed: its user data is nobody's
		if err := backend.RemovePrewarmDirs(p.cfg.Mounts.DataDir, rec.SandboxID); err != nil {
			p.log.WarnContext(ctx, "remove prewarm dirs", "sandbox_id", rec.SandboxID, "err", err)
		}
	}
	p.metrics.Destroyed(string(reason))
	p.gone(ctx, rec, string(reason))
	p.log.InfoContext(ctx, "sandbox destroyed", "sandbox_id", rec.SandboxID, "thread", rec.Thread, "reason", string(reason))
	return nil
}

// destroyBackend destroys rec's sandbox in a span.
func (p *Pool) destroyBackend(ctx context.Context, rec state.Record) error {
	ctx, span := p.span(ctx, spanDestroy, rec.SandboxID, rec.Thread)
	err := p.backend.Destroy(ctx, rec.Info())
	end(span, err)
	return err
}

// unlockLater releases h after the caller answered (see background): the
// record it guarded is written, so nobody needs to wait for the release
// but a destroy or a create of the same sandbox, which waits for the lock.
func (p *Pool) unlockLater(h *statedb.Held) { p.bg.run(func() { p.unlock(h) }) }

// Wait returns once the work acquires left running after they answered
// (lock releases, events) is done: before the Redis client is closed.
func (p *Pool) Wait() { p.bg.wait() }

func (p *Pool) unlock(h *statedb.Held) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.Release(ctx); err != nil {
		p.log.Warn("release sandbox lock", "err", err)
	}
}

// newRoute builds and caches the route of a live record.
func (p *Pool) newRoute(rec state.Record) (*Route, error) {
	base, socket := backend.HTTPBase(rec.URL)
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("sandbox %s has a bad url", rec.SandboxID)
	}
	r := &Route{
		SandboxID:   rec.SandboxID,
		User:        rec.User,
		Thread:      rec.Thread,
		Incarnation: rec.Incarnation,
		Backend:     rec.Backend,
		CreatedAt:   rec.CreatedAt,
		// A path is kept: a remote provisioner may hand out http://host/sandboxes/{id}.
		url:       &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/"), RawPath: strings.TrimSuffix(u.RawPath, "/")},
		transport: p.newRT(socket),
	}
	if rec.Secret != "" {
		r.key = []string{rec.Secret}
	}
	return p.cache.put(r, p.clock.Now().Add(p.cfg.CacheTTL)), nil
}

// alive asks the backend about rec's sandbox in a span.
func (p *Pool) alive(ctx context.Context, rec state.Record) (bool, error) {
	ctx, span := p.span(ctx, spanAlive, rec.SandboxID, rec.Thread)
	ok, err := p.backend.Alive(ctx, rec.Info())
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("alive", ok))
	}
	end(span, err)
	return ok, err
}

// Records lists the fleet's active and warm sandboxes.
func (p *Pool) Records(ctx context.Context) ([]state.Record, error) {
	recs, err := p.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return recs, nil
}

// Alive asks the backend whether rec's sandbox still runs.
func (p *Pool) Alive(ctx context.Context, rec state.Record) (bool, error) {
	ok, err := p.alive(ctx, rec)
	if err != nil {
		return false, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return ok, nil
}
