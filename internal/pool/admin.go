package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// What the operator CLI asks of the pool beyond serving threads: logs and
// resource use of one sandbox, and pruning what this fleet left behind.

// Fleet is the fleet label of this pool's sandboxes.
func (p *Pool) Fleet() string { return p.cfg.Fleet }

// Logs streams the backend's log of sid's sandbox (its server's output).
func (p *Pool) Logs(ctx context.Context, sid string, opts backend.LogOptions) (io.ReadCloser, error) {
	ls, ok := p.backend.(backend.LogStreamer)
	if !ok {
		return nil, backend.ErrNotSupported
	}
	rec, err := p.recorded(ctx, sid)
	if err != nil {
		return nil, err
	}
	return ls.Logs(ctx, rec.Info(), opts)
}

// Stats samples the resource use of sid's sandbox.
func (p *Pool) Stats(ctx context.Context, sid string) (backend.Stats, error) {
	st, ok := p.backend.(backend.Statter)
	if !ok {
		return backend.Stats{}, backend.ErrNotSupported
	}
	rec, err := p.recorded(ctx, sid)
	if err != nil {
		return backend.Stats{}, err
	}
	return st.Stats(ctx, rec.Info())
}

// CanStat says whether Stats can answer at all on this backend.
func (p *Pool) CanStat() bool {
	_, ok := p.backend.(backend.Statter)
	return ok
}

func (p *Pool) recorded(ctx context.Context, sid string) (state.Record, error) {
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return state.Record{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying {
		return state.Record{}, ErrNotFound
	}
	return rec, nil
}

// Pruned is one thing Prune removed (or, in a dry run, would remove).
type Pruned struct {
	Kind      string    `json:"kind"` // "sandbox" (running, no record) or a backend.Leftover kind
	Name      string    `json:"name"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	User      string    `json:"user,omitempty"`
	Thread    string    `json:"thread,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Error     string    `json:"error,omitempty"` // removing it failed; the rest went on
}

// PruneReport is what one Prune found.
type PruneReport struct {
	Fleet  string   `json:"fleet"`
	DryRun bool     `json:"dry_run"`
	Items  []Pruned `json:"items"`
}

// Prune removes this fleet's leftovers: running sandboxes with this fleet's
// label, an identity this gateway derives, and no record, older than ReconcileGrace (a create may be about to
// record a younger one), and what dead sandboxes left behind (backends that
// implement backend.Pruner). Other fleets' sandboxes are never looked at
// twice. dryRun only reports.
func (p *Pool) Prune(ctx context.Context, dryRun bool) (PruneReport, error) {
	rep := PruneReport{Fleet: p.cfg.Fleet, DryRun: dryRun, Items: []Pruned{}}
	live, records, err := p.bothSides(ctx, p.allBuckets())
	if err != nil {
		return rep, err
	}
	known := make(map[string]bool, len(records))
	for _, rec := range records {
		known[rec.SandboxID] = true
	}
	now := p.clock.Now()
	for _, info := range live {
		if known[info.SandboxID] || !backend.InFleet(info.Labels, p.cfg.Fleet) || now.Sub(info.CreatedAt) < p.cfg.ReconcileGrace {
			continue
		}
		if identity.ValidUser(info.User) != nil || identity.ValidThread(info.Thread) != nil ||
			identity.SandboxID(info.User, info.Thread) != info.SandboxID {
			continue // not a sandbox this gateway makes, whatever its labels say
		}
		item := Pruned{Kind: "sandbox", Name: info.SandboxID, SandboxID: info.SandboxID, User: info.User, Thread: info.Thread,
			CreatedAt: info.CreatedAt.UTC()}
		if !dryRun {
			item.Error = p.pruneFailed(ctx, item, p.pruneSandbox(ctx, info))
		}
		rep.Items = append(rep.Items, item)
	}
	pr, ok := p.backend.(backend.Pruner)
	if !ok {
		return rep, nil
	}
	left, err := pr.Leftovers(ctx, p.cfg.Fleet)
	if err != nil {
		return rep, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	for _, l := range left {
		item := Pruned{Kind: l.Kind, Name: l.Name, SandboxID: l.SandboxID}
		if !dryRun {
			item.Error = p.pruneFailed(ctx, item, pr.RemoveLeftover(ctx, l))
		}
		rep.Items = append(rep.Items, item)
	}
	if !dryRun && len(rep.Items) > 0 {
		p.log.InfoContext(ctx, "pruned", "fleet", p.cfg.Fleet, "items", len(rep.Items))
	}
	return rep, nil
}

// pruneSandbox destroys a running sandbox without a record, under its lock
// and only if it still has none.
func (p *Pool) pruneSandbox(ctx context.Context, info backend.Info) error {
	held, err := p.lock(ctx, info.SandboxID, 0)
	if err != nil {
		return lockErr(err)
	}
	defer p.unlock(held)
	if _, ok, err := p.store.Get(ctx, info.SandboxID); err != nil || ok {
		return errors.Join(err, errors.New("recorded meanwhile; kept"))
	}
	if err := p.backend.Destroy(ctx, info); err != nil {
		return err
	}
	p.metrics.Destroyed(string(ReasonAdmin))
	p.log.InfoContext(ctx, "pruned a sandbox without a record", "sandbox_id", info.SandboxID, "thread", info.Thread)
	return nil
}

// pruneFailed logs a failed removal and says so in words fit for a client
// (the error may name host paths).
func (p *Pool) pruneFailed(ctx context.Context, item Pruned, err error) string {
	if err == nil {
		return ""
	}
	p.log.WarnContext(ctx, "prune: remove failed", "kind", item.Kind, "sandbox_id", item.SandboxID, "err", err)
	return "not removed; the gateway log says why"
}
