package pool

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/telemetry"
)

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

// DestroyReason says why a sandbox was destroyed. It is a metric label, so
// the set is fixed.
type DestroyReason string

const (
	ReasonIdle         DestroyReason = "idle"            // the reaper
	ReasonEvicted      DestroyReason = "evicted"         // room for a create under max_sandboxes
	ReasonClient       DestroyReason = "client"          // DELETE /threads/{t}/sandbox?destroy=true
	ReasonProvisioner  DestroyReason = "provisioner_api" // DELETE /api/sandboxes/{id}
	ReasonInterrupted  DestroyReason = "interrupted"     // finishing a destroy a crashed replica left
	ReasonAdmin        DestroyReason = "admin"           // the operator CLI (/admin/v1)
	ReasonPrewarmTrim  DestroyReason = "prewarm_trim"    // a pre-started sandbox over Config.Prewarm, stale or failing its claim
	ReasonMaxLifetime  DestroyReason = "max_lifetime"    // older than Config.MaxLifetime (the lifetime loop)
	ReasonOptions      DestroyReason = "options"         // PUT /threads/{t}/sandbox changed the thread's template or options
	ReasonFailedHealth DestroyReason = "failed_health"   // its server stopped answering (the health loop)
	ReasonQuota        DestroyReason = "quota"           // a warm sandbox of a user at its quota, evicted for the user's next create
)

// Span names: one trace explains a slow first call (acquire, lock wait,
// discover, create with its readiness wait, then the proxy round trip).
const (
	spanAcquire    = "sandgate.acquire"
	spanLockWait   = "sandgate.lock.wait"
	spanReserve    = "sandgate.capacity.reserve"
	spanEvict      = "sandgate.capacity.evict"
	spanCreate     = "sandgate.backend.create"
	spanClaim      = "sandgate.backend.claim"
	spanDestroy    = "sandgate.backend.destroy"
	spanDiscover   = "sandgate.backend.discover"
	spanAlive      = "sandgate.backend.alive"
	spanResume     = "sandgate.backend.resume"
	spanFreeze     = "sandgate.backend.freeze"
	spanReapPass   = "sandgate.reaper.pass"
	spanFreezePass = "sandgate.freezer.pass"
	spanReconcile  = "sandgate.reconciler.pass"
	spanLifetime   = "sandgate.lifetime.pass"
)

// observer records acquires and opens the spans about one sandbox, named
// after the backend.
type observer struct {
	metrics *telemetry.Metrics
	backend string
}

// hit records a cached acquire. The hot path: the metric is an atomic add
// into a bound histogram, and a span is built only inside a sampled trace.
func (o observer) hit(ctx context.Context, r *Route, start time.Time) {
	o.metrics.Acquired(string(OutcomeHit), time.Since(start))
	if telemetry.Recording(ctx) {
		_, span := telemetry.Child(ctx, spanAcquire, trace.WithTimestamp(start))
		span.SetAttributes(append(telemetry.SandboxAttrs(r.SandboxID, r.Thread, r.Backend),
			telemetry.KeyOutcome.String(string(OutcomeHit)))...)
		span.End()
	}
}

// startAcquire opens the span of an acquire that missed the cache.
func (o observer) startAcquire(ctx context.Context, user, thread string) (context.Context, trace.Span) {
	ctx, span := telemetry.Child(ctx, spanAcquire)
	if span.IsRecording() {
		span.SetAttributes(telemetry.SandboxAttrs(identity.SandboxID(user, thread), thread, o.backend)...)
	}
	return ctx, span
}

// acquired closes what startAcquire opened and records the latency.
func (o observer) acquired(span trace.Span, start time.Time, out Outcome, err error) {
	if err != nil {
		out = "error"
	}
	o.metrics.Acquired(string(out), time.Since(start))
	if span.IsRecording() {
		span.SetAttributes(telemetry.KeyOutcome.String(string(out)))
	}
	end(span, err)
}

// span starts a child span about sandbox sid (see telemetry.Child); thread
// may be unknown ("").
func (o observer) span(ctx context.Context, name, sid, thread string) (context.Context, trace.Span) {
	ctx, span := telemetry.Child(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(telemetry.KeySandboxID.String(sid), telemetry.KeyBackend.String(o.backend))
		if thread != "" {
			span.SetAttributes(telemetry.KeyThreadID.String(thread))
		}
	}
	return ctx, span
}

// end ends span, failed when err is set.
func end(span trace.Span, err error) {
	telemetry.Fail(span, err)
	span.End()
}
