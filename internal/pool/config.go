package pool

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/statedb"
)

// Config of the pool. The zero value is the documented default.
type Config struct {
	// IdleTimeout destroys an active sandbox untouched this long and a warm one
	// this long after release. 0 = 10m; negative = never (DeerFlow's
	// idle_timeout: 0).
	IdleTimeout time.Duration
	// MaxSandboxes caps active + warm + creating sandboxes fleet-wide.
	// 0 = 3 (DeerFlow's replicas); negative = no cap.
	MaxSandboxes int
	// HardCap refuses creates at the cap when nothing warm can be evicted
	// (503 + Retry-After); the default soft cap creates beyond it with a warning.
	HardCap bool
	// MaxSandboxesPerUser caps one user's active + warm + creating sandboxes
	// fleet-wide (429 + Retry-After past it; the user's own oldest warm
	// sandbox is evicted first). 0 = no limit. Admin principals are exempt.
	MaxSandboxesPerUser int
	// MaxCreatesPerUser caps one user's creates in progress fleet-wide (429
	// + Retry-After past it). 0 = no limit. Admin principals are exempt.
	MaxCreatesPerUser int
	// AcquireTimeout is how long a create waits for capacity in hard mode
	// before answering 503. 0 = answer at once.
	AcquireTimeout time.Duration
	// ProvisionWait is how long a request waits for its sandbox to be created
	// before answering 503 + Retry-After (the create goes on). 0 = 30s.
	ProvisionWait time.Duration
	// CreateTimeout bounds one backend create including readiness. 0 = 2m.
	CreateTimeout time.Duration
	// CacheTTL bounds how long a replica trusts its cached route without
	// reading Redis. 0 = 5s.
	CacheTTL time.Duration
	// TouchInterval is how often a replica flushes activity to Redis. 0 = 1s.
	TouchInterval time.Duration
	// ReapInterval is how often the reaper looks for expired sandboxes.
	// 0 = 10s.
	ReapInterval time.Duration
	// LockTTL is the provisioning lock's TTL (refreshed while held). 0 = 15s.
	LockTTL time.Duration
	// ReconcileInterval is how often the backend's sandboxes are compared
	// with Redis. 0 = 30s; negative = never.
	ReconcileInterval time.Duration
	// ReconcileGrace is how old a sandbox without a record must be before the
	// reconciler adopts it (a create may be writing its record). 0 = 1m.
	ReconcileGrace time.Duration
	// ReconcileDryRun logs what the reconciler would do and does nothing.
	ReconcileDryRun bool
	// Solo: this gateway is the only one using the state, which starts
	// empty with the process (the embedded Redis). A sandbox without a
	// record created before the pool was is adopted at once, not after
	// ReconcileGrace: the grace waits for another replica's create to
	// record its sandbox, and there is none. Set by the gateway, not by
	// configuration.
	Solo bool
	// BucketLeaseTTL is how long a replica's lease on a bucket (the right to
	// reap and reconcile it) outlives its last renewal. 0 = 15s.
	BucketLeaseTTL time.Duration
	// Prewarm is how many pre-started sandboxes the fleet keeps for new
	// threads (backends that implement backend.Binder: process, docker,
	// kubernetes), in all: with templates, each template's share follows
	// its recent claims, at least its Template.Prewarm. 0 = the sum of the
	// templates' Prewarm (none without templates).
	Prewarm int
	// PauseWarm freezes warm sandboxes (backends that implement
	// backend.Freezer) and thaws them on reclaim.
	PauseWarm bool
	// MetricsInterval is how often the sampler (Sampler) measures each
	// sandbox this replica serves, on backends with a cheap meter
	// (backend.MeterOpener: process); others (docker, kubernetes) are
	// measured every metricsSlowEvery intervals. 0 = 1s.
	MetricsInterval time.Duration
	// MetricsPerSandbox exports one Prometheus series set per sampled
	// sandbox (labelled by sandbox id); off, only aggregates.
	MetricsPerSandbox bool
	// MetricsTopN is how many sandboxes, those using the most CPU and
	// those holding the most memory, get a Prometheus series each when
	// MetricsPerSandbox is off (2*N series at a time). 0 = none, the
	// default: a series named after a sandbox id is one more in the
	// time-series database for every sandbox that ever ranked, and /metrics
	// names no sandbox unless the operator asks. At most 100.
	MetricsTopN int
	// FreezeAfter freezes an active sandbox (backends that implement
	// backend.Freezer: process, docker) that has had no request and runs
	// no command for this long: its processes stop, its memory stays, and
	// the next request on any replica thaws it. 0 = never. It must exceed
	// cache_ttl plus touch_interval (see statedb.Store.Freeze) and stay
	// under idle_timeout. A template's FreezeAfter replaces it for its
	// sandboxes.
	FreezeAfter time.Duration
	// BusyIdleAfter: a running command that has used no CPU and written no
	// output this long no longer keeps its sandbox busy (one whose process
	// group is all stopped never does), so the freezer and the reaper treat
	// the sandbox as idle. Sent to the sandbox server with each activity
	// probe. 0 = 30m; negative = only a stop ends busy.
	BusyIdleAfter time.Duration
	// MaxLifetime destroys a sandbox this long after it was created, busy
	// or not (reason max_lifetime): nothing a tenant runs keeps one alive
	// for good. 0 = 24h; negative = never.
	MaxLifetime time.Duration
	// HealthInterval is how often each replica probes the sandboxes it
	// serves (Health). 0 = 10s; negative = never.
	HealthInterval time.Duration
	// HealthTimeout is how long a health probe waits for an answer (a slow
	// one within it is healthy). 0 = 5s.
	HealthTimeout time.Duration
	// HealthFailures is how many probes in a row without an answer destroy
	// a sandbox (reason failed_health). 0 = 3.
	HealthFailures int
	// PreviewMaxTTL is the longest ttl a preview link may be given, and
	// how long a rotated-out signing key keeps verifying. 0 = 24h.
	PreviewMaxTTL time.Duration

	// Instance names this replica in labels and logs.
	Instance string
	// Fleet is the backend.LabelFleet of every sandbox this pool makes; the
	// reconciler and Prune leave other fleets' sandboxes alone.
	// "" = backend.DefaultFleet.
	Fleet string
	// Mounts, Env and Labels go into every sandbox spec.
	Mounts backend.MountConfig
	Env    map[string]string
	Labels map[string]string
	// Egress is every sandbox's egress policy (zero: proxy, nothing allowed).
	Egress backend.Egress
	// Templates are what a create may choose from (Options.Template);
	// DefaultTemplate names the one a thread gets without choosing ("" =
	// none: the backend's configuration alone).
	Templates       []Template
	DefaultTemplate string
}

// validFleet: a value every backend accepts as a label (Kubernetes is the
// narrowest).
var validFleet = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// Defaults.
const (
	DefaultIdleTimeout       = 10 * time.Minute
	DefaultMaxSandboxes      = 3
	DefaultProvisionWait     = 30 * time.Second
	DefaultCreateTimeout     = 2 * time.Minute
	DefaultCacheTTL          = 5 * time.Second
	DefaultTouchInterval     = time.Second
	DefaultReapInterval      = 10 * time.Second
	DefaultReconcileInterval = 30 * time.Second
	DefaultReconcileGrace    = time.Minute
	DefaultMaxLifetime       = 24 * time.Hour
	DefaultHealthInterval    = 10 * time.Second
	DefaultHealthTimeout     = 5 * time.Second
	DefaultHealthFailures    = 3
	// DefaultBucketLeaseTTL is how long a bucket's lease outlives its
	// holder's last renewal: a bucket whose replica died is taken over
	// within it (plus one lease tick, a third of it).
	DefaultBucketLeaseTTL = 15 * time.Second
)

// Validate reports the first bad field by name.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"acquire_timeout", c.AcquireTimeout}, {"provision_wait", c.ProvisionWait},
		{"create_timeout", c.CreateTimeout}, {"cache_ttl", c.CacheTTL},
		{"touch_interval", c.TouchInterval}, {"reap_interval", c.ReapInterval},
		{"lock_ttl", c.LockTTL}, {"reconcile_grace", c.ReconcileGrace}, {"bucket_lease_ttl", c.BucketLeaseTTL},
		{"freeze_after", c.FreezeAfter}, {"preview_max_ttl", c.PreviewMaxTTL}, {"metrics_interval", c.MetricsInterval},
		{"health_timeout", c.HealthTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: must not be negative", d.name)
		}
	}
	if c.MaxSandboxesPerUser < 0 || c.MaxCreatesPerUser < 0 {
		return errors.New("max_sandboxes_per_user, max_creates_per_user: must not be negative")
	}
	if c.Prewarm < 0 {
		return errors.New("prewarm: must not be negative")
	}
	if c.HealthFailures < 0 {
		return errors.New("health_failures: must not be negative")
	}
	if c.MetricsTopN < 0 || c.MetricsTopN > maxMetricsTopN {
		return fmt.Errorf("metrics_top_n: 0 (none) to %d (a series each: the point is a bounded count)", maxMetricsTopN)
	}
	w := c.withDefaults()
	if w.IdleTimeout > 0 && w.IdleTimeout < 2*w.TouchInterval {
		return fmt.Errorf("idle_timeout: %s must be at least twice touch_interval (%s)", w.IdleTimeout, w.TouchInterval)
	}
	if w.FreezeAfter > 0 && w.FreezeAfter <= w.CacheTTL+w.TouchInterval {
		return fmt.Errorf("freeze_after: %s must exceed cache_ttl + touch_interval (%s): a replica may route to a sandbox that long without reading Redis",
			w.FreezeAfter, w.CacheTTL+w.TouchInterval)
	}
	if w.FreezeAfter > 0 && w.IdleTimeout > 0 && w.FreezeAfter >= w.IdleTimeout {
		return fmt.Errorf("freeze_after: %s must be shorter than idle_timeout (%s)", w.FreezeAfter, w.IdleTimeout)
	}
	for _, t := range c.Templates {
		if err := w.validateTemplateTimes(t); err != nil {
			return fmt.Errorf("templates: %s: %w", t.Name, err)
		}
	}
	if w.LockTTL < 300*time.Millisecond {
		return errors.New("lock_ttl: must be at least 300ms")
	}
	if w.BucketLeaseTTL < 300*time.Millisecond {
		return errors.New("bucket_lease_ttl: must be at least 300ms")
	}
	if c.Fleet != "" && !validFleet.MatchString(c.Fleet) {
		return fmt.Errorf("fleet: %q must be 1-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit (a label value)", c.Fleet)
	}
	if c.Mounts.DataDir == "" {
		return errors.New("data_dir: must be set")
	}
	return validateTemplates(c.Templates, c.DefaultTemplate)
}

// validateTemplateTimes checks t's idle and freeze delays against the
// fleet's (c, defaults applied): the rules of idle_timeout and
// freeze_after, each with the template's own value where it has one.
func (c Config) validateTemplateTimes(t Template) error {
	idle, freeze := c.IdleTimeout, c.FreezeAfter
	if t.IdleTimeout != 0 {
		idle = t.IdleTimeout
	}
	if t.FreezeAfter != 0 {
		freeze = t.FreezeAfter
	}
	if t.IdleTimeout > 0 && t.IdleTimeout < 2*c.TouchInterval {
		return fmt.Errorf("idle_timeout %s must be at least twice touch_interval (%s)", t.IdleTimeout, c.TouchInterval)
	}
	if t.FreezeAfter > 0 && t.FreezeAfter <= c.CacheTTL+c.TouchInterval {
		return fmt.Errorf("freeze_after %s must exceed cache_ttl + touch_interval (%s): a replica may route to a sandbox that long without reading Redis",
			t.FreezeAfter, c.CacheTTL+c.TouchInterval)
	}
	if freeze > 0 && idle > 0 && freeze >= idle {
		return fmt.Errorf("freeze_after %s must be shorter than idle_timeout (%s)", freeze, idle)
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.PreviewMaxTTL, DefaultPreviewMaxTTL)
	def(&c.ProvisionWait, DefaultProvisionWait)
	def(&c.CreateTimeout, DefaultCreateTimeout)
	def(&c.CacheTTL, DefaultCacheTTL)
	def(&c.TouchInterval, DefaultTouchInterval)
	def(&c.ReapInterval, DefaultReapInterval)
	def(&c.ReconcileInterval, DefaultReconcileInterval)
	def(&c.ReconcileGrace, DefaultReconcileGrace)
	def(&c.LockTTL, statedb.DefaultLockTTL)
	def(&c.BucketLeaseTTL, DefaultBucketLeaseTTL)
	def(&c.BusyIdleAfter, sandboxspec.DefaultBusyIdleAfter)
	def(&c.MaxLifetime, DefaultMaxLifetime)
	def(&c.HealthInterval, DefaultHealthInterval)
	def(&c.HealthTimeout, DefaultHealthTimeout)
	if c.HealthFailures == 0 {
		c.HealthFailures = DefaultHealthFailures
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = DefaultMaxSandboxes
	}
	if c.Prewarm == 0 {
		for _, t := range c.Templates {
			c.Prewarm += t.Prewarm
		}
	}
	if c.Fleet == "" {
		c.Fleet = backend.DefaultFleet
	}
	return c
}

// lifetimeInterval is how often the lifetime loop looks: a hundredth of
// MaxLifetime, at least ReapInterval and at most a minute (a pass reads
// every record of the replica's buckets, as the reconciler's does).
func (c Config) lifetimeInterval() time.Duration {
	return min(max(c.MaxLifetime/100, c.ReapInterval), time.Minute)
}

// freezeInterval is how often the freezer looks: a tenth of the shortest
// freeze delay (the fleet's or a template's), between 100ms and
// ReapInterval, so a sandbox freezes at most ~10% late.
func (c Config) metricsInterval() time.Duration { return cmp.Or(c.MetricsInterval, time.Second) }

// maxMetricsTopN bounds MetricsTopN.
const maxMetricsTopN = 100

func (c Config) freezeInterval() time.Duration {
	shortest := c.FreezeAfter
	for _, t := range c.Templates {
		if t.FreezeAfter > 0 && (shortest <= 0 || t.FreezeAfter < shortest) {
			shortest = t.FreezeAfter
		}
	}
	return min(max(shortest/10, 100*time.Millisecond), c.ReapInterval)
}
