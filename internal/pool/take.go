package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// takes hands a new thread a pre-started sandbox (see prewarm.go for the
// pool's refill): offered by the capacity reservation, taken under its
// lock, renamed to the thread's (backend.Binder) and recorded active.
type takes struct {
	binder backend.Binder // nil: the backend cannot hand one out
	be     backend.Backend
	size   int               // Config.Prewarm
	fps    map[string]string // prewarmFingerprint by template name
	recipe recipe
	// holdFor is how long a taken sandbox's reservation lasts (a create's).
	holdFor time.Duration
	lockTTL time.Duration
	store   prewarmTaker
	locks   locks
	bg      *background
	obs     observer
	metrics *telemetry.Metrics
	clock   Clock
	log     *slog.Logger
	// refill wakes the Prewarmer after a claim.
	refill chan<- struct{}
	// record writes the claimed sandbox's active record and caches its route.
	record func(ctx context.Context, info backend.Info, user, thread string) (*Route, error)
}

// prewarmTaker takes a pre-started sandbox's record for a thread.
type prewarmTaker interface {
	TakePrewarmRecord(ctx context.Context, pw, sid, user string, deadline time.Time) (state.Record, func(context.Context) error, bool, error)
}

// takeable returns the fingerprint of the pre-started sandboxes a new
// thread of template t with options o may take, "" = none: the pool is off,
// o asks for what a running sandbox cannot be given (env of its own, other
// memory), or the thread has data of its own on the host. (One with an
// egress policy of its own is turned down by the reservation.)
func (c *takes) takeable(user, thread string, t Template, o Options) string {
	if c.size <= 0 || c.binder == nil || len(o.Env) > 0 || o.Memory != 0 && o.Memory != t.Backend.Memory {
		return ""
	}
	unused, err := backend.ThreadDirUnused(c.recipe.mounts.DataDir, user, thread)
	if err != nil || !unused {
		return ""
	}
	return c.fps[t.Name]
}

// takePrewarm takes pre-started sandbox pw for sid (see statedb.TakePrewarm)
// under pw's lock, which it returns held: the reconciler must not adopt pw
// back while it is being claimed. ok is false when another replica got it.
func (c *takes) takePrewarm(ctx context.Context, pw, sid, user string) (state.Record, *statedb.Held, bool, error) {
	held, err := c.locks.lock(ctx, pw, 0)
	if errors.Is(err, state.ErrLocked) {
		return state.Record{}, nil, false, nil
	}
	if err != nil {
		return state.Record{}, nil, false, fmt.Errorf("%w: %w", ErrState, err)
	}
	rec, forget, ok, err := c.store.TakePrewarmRecord(ctx, pw, sid, user, c.clock.Now().Add(c.holdFor))
	if err == nil && ok {
		err = afterAnswer(ctx, forget)
	}
	if err != nil || !ok {
		c.locks.unlock(held)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrState, err)
		}
		return state.Record{}, nil, false, err
	}
	return rec, held, true, nil
}

// take binds the taken pre-started sandbox rec to (user, thread, sid) and
// records it active. On an error rec's sandbox is destroyed and the caller
// creates one cold: sid's capacity reservation is already held.
func (c *takes) take(ctx context.Context, rec state.Record, held *statedb.Held, user, thread, sid string, t Template) (*Route, error) {
	defer c.bg.unlockLater(c.locks, held)
	defer func() {
		select {
		case c.refill <- struct{}{}:
		default:
		}
	}()
	pw := rec.SandboxID
	warm := rec.Info()
	r, err := c.bind(ctx, rec, user, thread, sid, t)
	if err != nil {
		c.log.WarnContext(ctx, "prewarmed sandbox not claimed; creating one", "sandbox_id", sid, "thread", thread,
			"prewarm_id", pw, "err", err)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.lockTTL)
		defer cancel()
		if derr := c.be.Destroy(dctx, warm); derr != nil {
			c.log.WarnContext(ctx, "destroy unclaimed prewarmed sandbox", "sandbox_id", pw, "err", derr)
		}
		_ = backend.RemovePrewarmDirs(c.recipe.mounts.DataDir, pw)
		c.metrics.Destroyed(string(ReasonPrewarmTrim))
	}
	return r, err
}

func (c *takes) bind(ctx context.Context, rec state.Record, user, thread, sid string, t Template) (*Route, error) {
	if rec.Prewarm != c.fps[t.Name] {
		return nil, errors.New("made from another configuration")
	}
	mounts, err := backend.ThreadMounts(c.recipe.mounts, user, thread)
	if err != nil {
		return nil, err
	}
	if err := backend.AdoptPrewarmDirs(c.recipe.mounts.DataDir, rec.SandboxID, user, thread); err != nil {
		return nil, err
	}
	spec := c.recipe.apply(backend.Spec{SandboxID: sid, User: user, Thread: thread, Mounts: mounts, Secret: rec.Secret},
		t, Options{}, backend.Egress{}, false)
	ctx, span := c.obs.span(ctx, spanClaim, sid, thread)
	info, err := c.binder.Bind(ctx, rec.Info(), spec)
	end(span, err)
	if err != nil {
		return nil, err
	}
	return c.record(ctx, info, user, thread)
}

// prewarmFingerprint identifies what a sandbox of template t is made from
// besides its thread: a pre-started sandbox made from another one is never
// claimed.
func prewarmFingerprint(cfg Config, backendName string, t Template) string {
	b, _ := json.Marshal(struct {
		Backend, Fleet, Skills, ACP string
		Extra                       []backend.Mount
		Env, Labels                 map[string]string
		Egress                      backend.Egress
		Template                    backend.Template
		TemplateEnv                 map[string]string
		TemplateEgress              *backend.Egress
	}{backendName, cfg.Fleet, cfg.Mounts.SkillsDir, cfg.Mounts.ACPWorkspace, cfg.Mounts.Extra, cfg.Env, cfg.Labels, cfg.Egress,
		t.Backend, t.Env, t.Egress})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// prewarmTemplates are the templates the prewarm pool keeps sandboxes of:
// the configured ones, or without any the zero Template.
func (c Config) prewarmTemplates() []Template {
	if len(c.Templates) == 0 {
		return []Template{{}}
	}
	return c.Templates
}

// prewarmFingerprints maps each of prewarmTemplates' names to its fingerprint.
func prewarmFingerprints(cfg Config, backendName string) map[string]string {
	fps := make(map[string]string, len(cfg.Templates)+1)
	for _, t := range cfg.prewarmTemplates() {
		fps[t.Name] = prewarmFingerprint(cfg, backendName, t)
	}
	return fps
}
