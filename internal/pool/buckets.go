package pool

import (
	"context"
	"hash/fnv"
	"log/slog"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
)

// BucketLeases divides the buckets between the replicas alive, so each
// reaps and reconciles its share and the work per replica falls as replicas
// are added. Every replica computes the same rendezvous owner of each
// bucket from the replicas that beat within one lease TTL, takes the leases
// of its own and lets go of the others; a lease only divides work (the
// record and the sandbox lock keep destroys exactly-once), so replicas that
// disagree for a moment overlap, they never skip.
type BucketLeases struct{ p bucketLeasesParams }

type bucketLeasesParams struct {
	instance string
	// token names this process in the leases, unique even if two replicas
	// share an instance name.
	token string
	ttl   time.Duration
	store leaseStore
	held  *heldBuckets
	clock Clock
	log   *slog.Logger
}

// leaseStore reads the replicas alive and takes and lets go of bucket leases.
type leaseStore interface {
	Replicas(ctx context.Context) ([]state.Replica, error)
	Keys() statedb.Keys
	HoldBuckets(ctx context.Context, token string, want, drop []int, ttl time.Duration) ([]int, error)
}

func newBucketLeases(p bucketLeasesParams) *BucketLeases { return &BucketLeases{p: p} }

// Run takes its buckets at once, then every third of the lease TTL.
func (l *BucketLeases) Run(ctx context.Context) {
	tick := l.p.ttl / 3
	if err := runPass(ctx, tick, l.Pass); err != nil && ctx.Err() == nil {
		l.p.log.Warn("bucket leases pass failed", "err", err)
	}
	every(ctx, l.p.log, "bucket leases", tick, l.Pass)
}

// Pass renews this replica's leases and takes or lets go of buckets as
// replicas come and go.
func (l *BucketLeases) Pass(ctx context.Context) error {
	p := l.p
	now := p.clock.Now()
	reps, err := p.store.Replicas(ctx)
	if err != nil {
		return err
	}
	alive := []string{p.instance}
	for _, r := range reps {
		if r.Instance != p.instance && now.Sub(r.Seen) <= p.ttl {
			alive = append(alive, r.Instance)
		}
	}
	var want, drop []int
	for b := range p.store.Keys().Buckets() {
		if rendezvous(b, alive) == p.instance {
			want = append(want, b)
		} else {
			drop = append(drop, b)
		}
	}
	held, err := p.store.HoldBuckets(ctx, p.token, want, drop, p.ttl)
	if err != nil {
		return err
	}
	p.held.set(held)
	return nil
}

// rendezvous is bucket b's rendezvous owner among replicas: the highest hash of
// (replica, bucket), so a replica joining or leaving moves only its share.
func rendezvous(b int, replicas []string) string {
	best, top := "", uint64(0)
	for _, r := range replicas {
		h := fnv.New64a()
		_, _ = h.Write([]byte(r + "/" + strconv.Itoa(b)))
		if v := mix(h.Sum64()); best == "" || v > top {
			best, top = r, v
		}
	}
	return best
}

// mix is MurmurHash3's 64-bit finalizer: FNV alone barely separates names
// that differ in their last character (r1, r2), and rendezvous hashing
// needs every bit to count.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
