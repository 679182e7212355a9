package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/api"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// What the operator CLI asks of the pool beyond serving threads: logs and
// resource use of one sandbox, and pruning what this fleet left behind.

// Admin is what the operator API asks of the pool beyond serving threads.
type Admin struct{ p adminParams }

type adminParams struct {
	fleet   string
	grace   time.Duration // Config.ReconcileGrace
	backend backend.Backend
	store   adminStore
	buckets int // in the layout: Prune looks at all of them
	locks   locks
	metrics *telemetry.Metrics
	clock   Clock
	log     *slog.Logger
}

// adminStore reads records.
type adminStore interface {
	bucketRecorder
	Get(ctx context.Context, sid string) (state.Record, bool, error)
}

func newAdmin(p adminParams) *Admin { return &Admin{p: p} }

// Fleet is the fleet label of this pool's sandboxes.
func (a *Admin) Fleet() string { return a.p.fleet }

// Logs streams the backend's log of sid's sandbox (its server's output).
func (a *Admin) Logs(ctx context.Context, sid string, opts backend.LogOptions) (io.ReadCloser, error) {
	ls, ok := a.p.backend.(backend.LogStreamer)
	if !ok {
		return nil, backend.Unsupported("logs", "the backend keeps no log of its sandboxes")
	}
	rec, err := a.recorded(ctx, sid)
	if err != nil {
		return nil, err
	}
	return ls.Logs(ctx, rec.Info(), opts)
}

// Stats samples the resource use of sid's sandbox.
func (a *Admin) Stats(ctx context.Context, sid string) (backend.Stats, error) {
	st, ok := a.p.backend.(backend.Statter)
	if !ok {
		return backend.Stats{}, backend.Unsupported("stats", "the backend cannot measure its sandboxes (kubernetes: set kubernetes_server to run Sandgate's server, which measures itself)")
	}
	rec, err := a.recorded(ctx, sid)
	if err != nil {
		return backend.Stats{}, err
	}
	return st.Stats(ctx, rec.Info())
}

// Commands reads the last limit records of the commands that ended in
// sid's sandbox, from its server (a third-party image has none:
// backend.ErrNotSupported).
func (a *Admin) Commands(ctx context.Context, sid string, limit int) (sandboxspec.CommandLog, error) {
	rec, err := a.recorded(ctx, sid)
	if err != nil {
		return sandboxspec.CommandLog{}, err
	}
	return backend.ServerCommands(ctx, rec.Info(), limit)
}

// CanStat says whether Stats can answer at all on this backend.
func (a *Admin) CanStat() bool {
	_, ok := a.p.backend.(backend.Statter)
	return ok
}

func (a *Admin) recorded(ctx context.Context, sid string) (state.Record, error) {
	rec, ok, err := a.p.store.Get(ctx, sid)
	if err != nil {
		return state.Record{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying {
		return state.Record{}, ErrNotFound
	}
	return rec, nil
}

// Prune removes this fleet's leftovers: running sandboxes with this fleet's
// label, an identity this gateway derives, and no record, older than ReconcileGrace (a create may be about to
// record a younger one), and what dead sandboxes left behind (backends that
// implement backend.Pruner). Other fleets' sandboxes are never looked at
// twice. dryRun only reports.
func (a *Admin) Prune(ctx context.Context, dryRun bool) (api.PruneReport, error) {
	rep := api.PruneReport{Fleet: a.p.fleet, DryRun: dryRun, Items: []api.Pruned{}}
	live, records, err := bothSides(ctx, a.p.backend, a.p.store, allBuckets(a.p.buckets))
	if err != nil {
		return rep, err
	}
	known := make(map[string]bool, len(records))
	for _, rec := range records {
		known[rec.SandboxID] = true
	}
	now := a.p.clock.Now()
	for _, info := range live {
		if known[info.SandboxID] || !backend.InFleet(info.Labels, a.p.fleet) || now.Sub(info.CreatedAt) < a.p.grace {
			continue
		}
		if identity.ValidUser(info.User) != nil || identity.ValidThread(info.Thread) != nil ||
			identity.SandboxID(info.User, info.Thread) != info.SandboxID {
			continue // not a sandbox this gateway makes, whatever its labels say
		}
		item := api.Pruned{Kind: "sandbox", Name: info.SandboxID, SandboxID: info.SandboxID, User: info.User, Thread: info.Thread,
			CreatedAt: info.CreatedAt.UTC()}
		if !dryRun {
			item.Error = a.pruneFailed(ctx, item, a.pruneSandbox(ctx, info))
		}
		rep.Items = append(rep.Items, item)
	}
	pr, ok := a.p.backend.(backend.Pruner)
	if !ok {
		return rep, nil
	}
	left, err := pr.Leftovers(ctx, a.p.fleet)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	for _, l := range left {
		item := api.Pruned{Kind: l.Kind, Name: l.Name, SandboxID: l.SandboxID}
		if !dryRun {
			item.Error = a.pruneFailed(ctx, item, pr.RemoveLeftover(ctx, l))
		}
		rep.Items = append(rep.Items, item)
	}
	if !dryRun && len(rep.Items) > 0 {
		a.p.log.InfoContext(ctx, "pruned", "fleet", a.p.fleet, "items", len(rep.Items))
	}
	return rep, nil
}

// pruneSandbox destroys a running sandbox without a record, under its lock
// and only if it still has none.
func (a *Admin) pruneSandbox(ctx context.Context, info backend.Info) error {
	held, err := a.p.locks.lock(ctx, info.SandboxID, 0)
	if err != nil {
		return lockErr(err)
	}
	defer a.p.locks.unlock(held)
	if _, ok, err := a.p.store.Get(ctx, info.SandboxID); err != nil || ok {
		return errors.Join(err, errors.New("recorded meanwhile; kept"))
	}
	if err := a.p.backend.Destroy(ctx, info); err != nil {
		return err
	}
	a.p.metrics.Destroyed(string(ReasonAdmin))
	a.p.log.InfoContext(ctx, "pruned a sandbox without a record", "sandbox_id", info.SandboxID, "thread", info.Thread)
	return nil
}

// pruneFailed logs a failed removal and says so in words fit for a client
// (the error may name host paths).
func (a *Admin) pruneFailed(ctx context.Context, item api.Pruned, err error) string {
	if err == nil {
		return ""
	}
	a.p.log.WarnContext(ctx, "prune: remove failed", "kind", item.Kind, "sandbox_id", item.SandboxID, "err", err)
	return "not removed; the gateway log says why"
}
