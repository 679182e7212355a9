package pool

import "github.com/sandgate/sandgate/internal/backend"

// Each background loop, and the operator and hold APIs, is built here from
// a Pool: the params of each name exactly what it uses, the Pool's shared
// helpers passed in explicitly. The gateway runs the loops (Run) beside
// the Pool; a test or a benchmark drives one pass (Pass, Flush).

// NewToucher returns the touch loop of p.
func NewToucher(p *Pool) *Toucher {
	return newToucher(toucherParams{interval: p.cfg.TouchInterval, cache: p.cache, store: p.store, clock: p.clock, log: p.log})
}

// NewReaper returns the reaper of p.
func NewReaper(p *Pool) *Reaper {
	return newReaper(reaperParams{idleTimeout: p.cfg.IdleTimeout, templateIdle: p.templates.idleTimeouts(p.cfg.IdleTimeout),
		interval: p.cfg.ReapInterval, store: p.store,
		held: p.held, cache: p.cache, locks: p.locks, probe: p.probe, destroyer: p.destroyer, metrics: p.metrics,
		tracer: p.tracer, clock: p.clock, log: p.log})
}

// NewFreezer returns the freezer of p.
func NewFreezer(p *Pool) *Freezer {
	return newFreezer(freezerParams{after: p.cfg.FreezeAfter, templateAfter: p.templates.freezeAfters(p.cfg.FreezeAfter),
		interval: p.cfg.freezeInterval(), store: p.store,
		held: p.held, cache: p.cache, locks: p.locks, probe: p.probe, stopper: p.stopper, tracer: p.tracer,
		clock: p.clock, log: p.log})
}

// NewLifetime returns the lifetime loop of p.
func NewLifetime(p *Pool) *Lifetime {
	return newLifetime(lifetimeParams{maxLifetime: p.cfg.MaxLifetime, interval: p.cfg.lifetimeInterval(),
		store: p.store, held: p.held, locks: p.locks, destroyer: p.destroyer, tracer: p.tracer, clock: p.clock, log: p.log})
}

// NewHealth returns the health check of p.
func NewHealth(p *Pool) *Health {
	return newHealth(healthParams{interval: p.cfg.HealthInterval, timeout: p.cfg.HealthTimeout, failures: p.cfg.HealthFailures,
		cache: p.cache, store: p.store, locks: p.locks, destroyer: p.destroyer, log: p.log})
}

// NewReconciler returns the reconciler of p.
func NewReconciler(p *Pool) *Reconciler {
	rp := reconcilerParams{interval: p.cfg.ReconcileInterval, grace: p.cfg.ReconcileGrace, dryRun: p.cfg.ReconcileDryRun,
		fleet: p.cfg.Fleet, backendName: p.name, backend: p.backend, store: p.store, held: p.held, cache: p.cache,
		locks: p.locks, destroyer: p.destroyer, notes: p.notes, metrics: p.metrics, tracer: p.tracer, clock: p.clock, log: p.log}
	if p.warmPauser == nil { // with pause_warm, a reclaim resumes it anyway
		rp.resume = p.stopper.pz
	}
	if p.cfg.Solo {
		rp.adoptBefore = p.started
	}
	return newReconciler(rp)
}

// NewPrewarmer returns the refill loop of p.
func NewPrewarmer(p *Pool) *Prewarmer {
	_, canBind := p.backend.be.(backend.Binder)
	return newPrewarmer(prewarmerParams{size: p.cfg.Prewarm, templates: p.cfg.prewarmTemplates(), fps: p.takes.fps,
		canBind: canBind, recipe: p.recipe,
		maxSandboxes: p.cfg.MaxSandboxes, createTimeout: p.cfg.CreateTimeout, lockTTL: p.cfg.LockTTL,
		backend: p.backend.be, backendName: p.name, store: p.store, destroy: p.Destroy, locks: p.locks,
		refill: p.refill, metrics: p.metrics, clock: p.clock, log: p.log})
}

// NewHeartbeat returns the heartbeat loop of p.
func NewHeartbeat(p *Pool) *Heartbeat {
	return newHeartbeat(heartbeatParams{instance: p.cfg.Instance, store: p.store, clock: p.clock, log: p.log})
}

// NewBucketLeases returns the bucket lease loop of p.
func NewBucketLeases(p *Pool) *BucketLeases {
	return newBucketLeases(bucketLeasesParams{instance: p.cfg.Instance, token: p.leaseToken, ttl: p.cfg.BucketLeaseTTL,
		store: p.store, held: p.held, clock: p.clock, log: p.log})
}

// NewAdmin returns the operator API of p.
func NewAdmin(p *Pool) *Admin {
	return newAdmin(adminParams{fleet: p.cfg.Fleet, grace: p.cfg.ReconcileGrace, backend: p.backend.be, store: p.store,
		buckets: p.held.n, locks: p.locks, metrics: p.metrics, clock: p.clock, log: p.log})
}

// NewHolder returns the hold and freeze API of p.
func NewHolder(p *Pool) *Holder {
	return newHolder(holderParams{lockWait: p.cfg.ProvisionWait, freezeWait: p.cfg.CacheTTL + p.cfg.TouchInterval,
		backend: p.name, warmPaused: p.warmPauser != nil, store: p.store, cache: p.cache, locks: p.locks,
		probe: p.probe, stopper: p.stopper, obs: p.obs, clock: p.clock, log: p.log})
}

// NewSampler returns the metrics sampler of p.
func NewSampler(p *Pool) *Sampler {
	return newSampler(samplerParams{interval: p.cfg.metricsInterval(), backendName: p.name, backend: p.backend.be,
		cache: p.cache, meters: p.meters, oomKilled: p.notes.oomKilled, clock: p.clock, log: p.log})
}

// NewOOMWatch returns the loop publishing the OOM kills p's backend's
// engine reports (a no-op on a backend that reports none).
func NewOOMWatch(p *Pool) *OOMWatch {
	w, _ := p.backend.be.(backend.OOMWatcher)
	return newOOMWatch(oomWatchParams{fleet: p.cfg.Fleet, watcher: w, backendName: p.name, notes: p.notes, log: p.log})
}
