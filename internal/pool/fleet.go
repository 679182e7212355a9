package pool

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/state"
)

// heldBuckets are the buckets this replica reaps, freezes and reconciles:
// those whose leases BucketLeases took, or every bucket when no lease loop
// runs (one replica, tests).
type heldBuckets struct {
	held atomic.Pointer[[]int]
	n    int // buckets in the layout
}

func (h *heldBuckets) mine() []int {
	if held := h.held.Load(); held != nil {
		return *held
	}
	return allBuckets(h.n)
}

func (h *heldBuckets) set(held []int) { h.held.Store(&held) }

func allBuckets(n int) []int {
	all := make([]int, n)
	for b := range all {
		all[b] = b
	}
	return all
}

// sandboxLister lists what the backend runs.
type sandboxLister interface {
	List(ctx context.Context) ([]backend.Info, error)
}

// bucketRecorder reads every record of some buckets.
type bucketRecorder interface {
	BucketRecords(ctx context.Context, buckets []int) ([]state.Record, error)
}

// bothSides lists what the backend runs and what Redis records in buckets,
// the two sides the reconciler and prune compare.
func bothSides(ctx context.Context, be sandboxLister, store bucketRecorder, buckets []int) ([]backend.Info, []state.Record, error) {
	live, err := be.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: list sandboxes: %w", backend.ErrUnavailable, err)
	}
	records, err := store.BucketRecords(ctx, buckets)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return live, records, nil
}
