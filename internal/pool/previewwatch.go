package pool

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/preview"
	"github.com/sandgate/sandgate/internal/statedb"
)

// previewResubscribeDelay paces a new subscription after Redis dropped
// the last (or was not reachable).
const previewResubscribeDelay = time.Second

// PreviewWatcher keeps this replica's copy of the fleet's preview-link
// keys and revoked ids current: it subscribes to the preview channel,
// then (so that nothing published in between is missed) loads both from
// Redis, then applies each announcement as it arrives: a revocation takes
// effect here as soon as Redis delivers it. After any error it starts
// over, loading everything again.
type PreviewWatcher struct {
	store *statedb.Store
	links *preview.Links
	clock Clock
	log   *slog.Logger
}

// NewPreviewWatcher returns p's watcher.
func NewPreviewWatcher(p *Pool) *PreviewWatcher {
	return &PreviewWatcher{store: p.store, links: p.links, clock: p.clock, log: p.log}
}

// Run watches until ctx ends.
func (w *PreviewWatcher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.watchOnce(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("preview link watch failed; starting over", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(previewResubscribeDelay):
		}
	}
}

func (w *PreviewWatcher) watchOnce(ctx context.Context) error {
	sub, err := w.store.SubscribePreviews(ctx)
	if err != nil {
		return err
	}
	defer sub.Close()
	// A subscription's read does not end with ctx (go-redis honours only
	// a deadline): closing it does, so the loop stops with the gateway.
	defer context.AfterFunc(ctx, func() { _ = sub.Close() })()
	if err := w.loadKeys(ctx); err != nil {
		return err
	}
	if err := w.loadRevoked(ctx); err != nil {
		return err
	}
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		w.apply(ctx, msg)
	}
}

// apply handles "r <id> <expires>" (a revocation) and "k" (keys changed).
func (w *PreviewWatcher) apply(ctx context.Context, msg string) {
	if msg == "k" {
		if err := w.loadKeys(ctx); err != nil {
			w.log.Warn("preview keys reload failed", "err", err)
		}
		return
	}
	f := strings.Fields(msg)
	if len(f) != 3 || f[0] != "r" {
		w.log.Warn("preview announcement not understood")
		return
	}
	id, ok := preview.ParseID(f[1])
	exp, err := strconv.ParseUint(f[2], 10, 32)
	if !ok || err != nil {
		w.log.Warn("preview revocation not understood")
		return
	}
	w.links.Revoked.Add(id, uint32(exp), w.clock.Now())
}

func (w *PreviewWatcher) loadKeys(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	set, err := w.store.PreviewKeys(lctx, w.clock.Now())
	if err != nil {
		return err
	}
	keys := make(map[uint16]*preview.Key, len(set.Secrets))
	for id, secret := range set.Secrets {
		keys[id] = preview.NewKey(secret)
	}
	w.links.Keys.Replace(set.Current, keys)
	return nil
}

func (w *PreviewWatcher) loadRevoked(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all, err := w.store.PreviewRevoked(lctx, w.clock.Now())
	if err != nil {
		return err
	}
	ids := make(map[[preview.IDLen]byte]uint32, len(all))
	for s, exp := range all {
		if id, ok := preview.ParseID(s); ok {
			ids[id] = uint32(exp)
		}
	}
	w.links.Revoked.Replace(ids)
	return nil
}
