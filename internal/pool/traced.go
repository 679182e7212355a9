package pool

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/state"
)

// tracedBackend makes the backend calls the pool and its loops share, each
// in a span.
type tracedBackend struct {
	be  backend.Backend
	obs observer
}

// alive asks the backend about rec's sandbox.
func (t tracedBackend) alive(ctx context.Context, rec state.Record) (bool, error) {
	ctx, span := t.obs.span(ctx, spanAlive, rec.SandboxID, rec.Thread)
	ok, err := t.be.Alive(ctx, rec.Info())
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("alive", ok))
	}
	end(span, err)
	return ok, err
}

// discover asks the backend for a running sid.
func (t tracedBackend) discover(ctx context.Context, sid, thread string) (backend.Info, bool, error) {
	ctx, span := t.obs.span(ctx, spanDiscover, sid, thread)
	info, found, err := t.be.Discover(ctx, sid)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("found", found))
	}
	end(span, err)
	return info, found, err
}

// destroy destroys rec's sandbox.
func (t tracedBackend) destroy(ctx context.Context, rec state.Record) error {
	ctx, span := t.obs.span(ctx, spanDestroy, rec.SandboxID, rec.Thread)
	err := t.be.Destroy(ctx, rec.Info())
	end(span, err)
	return err
}
