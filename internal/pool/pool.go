// Package pool hands out sandboxes: acquire (replica cache, then Redis, then
// lock + discover + create), release to the warm pool, destroy, and the
// background loops that keep the fleet-wide pool honest (touch flush, idle
// reaper, freezer, lifetime, reconciler, prewarm refill, heartbeat, bucket
// leases). All shared state lives in Redis through statedb.Store.
//
// Pool does acquisition, release and destroy. Each loop, and the operator
// and hold APIs (Admin, Holder), is its own type built from a params struct
// of exactly what it uses (wire.go builds them from a Pool); the helpers
// they share (locks, cache, destroyer, stopper, prober, notifier) are
// concrete types of their own.
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
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/preview"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
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
	// Meters measure for the metrics sampler what the backend does not
	// (thread data, egress bytes); zero = none.
	Meters SamplerMeters
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
	backend tracedBackend
	name    string
	newRT   func(socket string) http.RoundTripper
	clock   Clock
	log     *slog.Logger
	cache   *cache
	ended   endedSet // incarnations the backend reported ended
	flight  singleflight.Group
	obs     observer
	creates CreateLimiter
	// newThread is Deps.NewThread.
	newThread func(ctx context.Context, user, thread string) error
	// warmPauser pauses warm sandboxes: nil without PauseWarm or a backend
	// that can.
	warmPauser backend.Freezer
	recipe     recipe
	templates  Templates

	// The helpers acquisition shares with the loops and admin types.
	bg        *background
	locks     locks
	notes     *notifier
	destroyer *destroyer
	probe     *prober
	stopper   *stopper
	takes     *takes
	capacity  *capacity
	held      *heldBuckets
	// links verifies preview links (kept current by the PreviewWatcher).
	links *preview.Links

	// For the loops only (wire.go).
	tracer  trace.Tracer
	metrics *telemetry.Metrics
	meters  SamplerMeters
	// refill wakes the Prewarmer after a claim.
	refill chan struct{}
	// leaseToken names this process in the bucket leases, unique even if
	// two replicas share an instance name.
	leaseToken string
	// started is when New ran: with Solo, sandboxes older than it are
	// adopted without the grace.
	started time.Time
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
	log := d.Log.With("backend", d.BackendName)
	obs := observer{metrics: d.Metrics, backend: d.BackendName}
	pz, _ := d.Backend.(backend.Freezer)
	binder, _ := d.Backend.(backend.Binder)
	if cfg.Prewarm > 0 && binder == nil {
		return nil, fmt.Errorf("prewarm %d: %w", cfg.Prewarm, backend.Unsupported("a pre-started pool",
			"backend "+d.BackendName+" cannot hand a running sandbox to a thread; set prewarm: 0"))
	}
	p := &Pool{
		cfg:       cfg,
		store:     d.Store,
		backend:   tracedBackend{be: d.Backend, obs: obs},
		name:      d.BackendName,
		newRT:     d.NewTransport,
		clock:     d.Clock,
		log:       log,
		cache:     newCache(),
		links:     &preview.Links{},
		obs:       obs,
		creates:   d.Creates,
		newThread: d.NewThread,
		bg:        &background{},
		locks:     locks{locker: statedb.NewLocker(d.Store, cfg.LockTTL), obs: obs, log: log},
		held:      &heldBuckets{n: d.Store.Keys().Buckets()},
		tracer:    d.Tracer,
		metrics:   d.Metrics,
		meters:    d.Meters,
		refill:    make(chan struct{}, 1),
		recipe:    cfg.recipe(),
		templates: newTemplates(cfg.Templates, cfg.DefaultTemplate),

		leaseToken: cfg.Instance + "/" + strconv.FormatInt(time.Now().UnixNano(), 36),
		started:    d.Clock.Now(),
	}
	if cfg.PauseWarm {
		p.warmPauser = pz
	}
	p.notes = &notifier{events: d.Events, backend: d.BackendName, bg: p.bg, failReason: d.FailReason,
		claim: d.Store.ClaimReport, log: log}
	p.destroyer = &destroyer{cache: p.cache, backend: p.backend, store: d.Store, dataDir: cfg.Mounts.DataDir,
		metrics: d.Metrics, notes: p.notes, log: log}
	p.probe = &prober{busyIdleAfter: cfg.BusyIdleAfter, newRT: d.NewTransport, store: d.Store, clock: d.Clock}
	p.stopper = &stopper{pz: pz, backend: d.BackendName, store: d.Store, cache: p.cache, probe: p.probe, obs: obs,
		clock: d.Clock, notes: p.notes, log: log}
	p.takes = &takes{binder: binder, be: d.Backend, size: cfg.Prewarm, fps: prewarmFingerprints(cfg, d.BackendName),
		recipe: p.recipe, holdFor: cfg.CreateTimeout + cfg.LockTTL, lockTTL: cfg.LockTTL, store: d.Store,
		locks: p.locks, bg: p.bg, obs: obs, metrics: d.Metrics, clock: d.Clock, log: log, refill: p.refill, record: p.record}
	p.capacity = &capacity{cfg: cfg, store: d.Store, takes: p.takes, locks: p.locks, destroyer: p.destroyer,
		notes: p.notes, obs: obs, metrics: d.Metrics, clock: d.Clock, log: log}
	if w, ok := d.Backend.(backend.IncarnationWatcher); ok {
		w.OnEnded(p.incarnationEnded)
	}
	return p, nil
}

// Config returns the effective configuration (defaults applied).
func (p *Pool) Config() Config { return p.cfg }

// Wait returns once the work acquires left running after they answered
// (lock releases, events) is done: before the Redis client is closed.
func (p *Pool) Wait() { p.bg.wait() }

// Record returns the Redis record of sid.
func (p *Pool) Record(ctx context.Context, sid string) (state.Record, bool, error) {
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return rec, false, fmt.Errorf("%w: %w", ErrState, err)
	}
	return rec, ok, nil
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
	ok, err := p.backend.alive(ctx, rec)
	if err != nil {
		return false, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return ok, nil
}

// record writes an active record for a live sandbox and caches its route.
func (p *Pool) record(ctx context.Context, info backend.Info, user, thread string) (*Route, error) {
	info.User, info.Thread = user, thread
	if info.Backend == "" {
		info.Backend = p.name
	}
	if info.CreatedAt.IsZero() {
		info.CreatedAt = p.clock.Now()
	}
	rec := state.RecordFromInfo(info, state.StateActive)
	commit, err := p.store.RecordActive(ctx, rec, p.clock.Now())
	if err == nil {
		err = afterAnswer(ctx, commit)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return p.newRoute(rec)
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
		Template:    rec.Template,
		CreatedAt:   rec.CreatedAt,
		// A path is kept: a remote provisioner may hand out http://host/sandboxes/{id}.
		url:       &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/"), RawPath: strings.TrimSuffix(u.RawPath, "/")},
		transport: p.newRT(socket),
		portHost:  rec.PortHost,
	}
	r.preview.Route = r
	if rec.Secret != "" {
		r.key = []string{rec.Secret}
	}
	return p.cache.put(r, p.clock.Now().Add(p.cfg.CacheTTL)), nil
}

// conflict logs a record (or a running sandbox) at the caller's sandbox id
// that names another user or thread, and refuses it: the id formula cannot
// produce this (user names hold no ':'), so the record was written by an
// older version, a 64-bit prefix collision or someone with Redis access.
func conflict(ctx context.Context, log *slog.Logger, rec state.Record, user, thread string) error {
	log.WarnContext(ctx, "sandbox identity conflict: not served", "sandbox_id", rec.SandboxID,
		"user", user, "thread", thread, "record_user", rec.User, "record_thread", rec.Thread)
	return fmt.Errorf("%w: sandbox %s", ErrIdentityConflict, rec.SandboxID)
}

// thawsUnderLock: rec's sandbox must be thawed before it is routed to (it
// is frozen, or paused in the warm pool: warmPaused), which is done under
// its lock so it cannot interleave with a freeze or a pause.
func thawsUnderLock(rec state.Record, warmPaused bool) bool {
	return !rec.Frozen.IsZero() || rec.State == state.StateWarm && warmPaused
}
