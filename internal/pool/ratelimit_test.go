package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// budget allows n creates per user, then refuses with a fixed wait.
type budget struct {
	mu    sync.Mutex
	left  map[string]int
	asked []string
}

func (b *budget) AllowCreate(_ context.Context, user string) (time.Duration, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, user)
	if b.left[user] <= 0 {
		return 7 * time.Second, false, nil
	}
	b.left[user]--
	return 0, true, nil
}

func TestCreateLimiterCountsOnlyRealCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: -1})
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	lim := &budget{left: map[string]int{"alice": 1, "bob": 1}}
	p, err := New(e.cfg, Deps{Store: statedb.NewStore(rdb, ""), Backend: e.be, BackendName: "fake", Clock: e.clock, Creates: lim})
	if err != nil {
		t.Fatal(err)
	}
	if _, o, err := p.Acquire(ctx, "alice", "t1"); err != nil || o != OutcomeCold {
		t.Fatalf("first create: %v %v", o, err)
	}
	// A cached hit, a warm reclaim and a Redis hit on another replica are not creates.
	if _, o, err := p.Acquire(ctx, "alice", "t1"); err != nil || o != OutcomeHit {
		t.Fatalf("cached: %v %v", o, err)
	}
	if err := p.Release(ctx, "alice", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, o, err := p.Acquire(ctx, "alice", "t1"); err != nil || o != OutcomeWarm {
		t.Fatalf("warm: %v %v", o, err)
	}
	if len(lim.asked) != 1 {
		t.Fatalf("the limiter was asked %d times for one create", len(lim.asked))
	}
	// The second create is refused with the limiter's wait, and leaves no
	// record or capacity reservation behind.
	_, _, err = p.Acquire(ctx, "alice", "t2")
	var rl *RateLimitError
	if !errors.As(err, &rl) || !errors.Is(err, ErrRateLimited) || rl.RetryAfter != 7*time.Second || rl.User != "alice" {
		t.Fatalf("over the limit: %v", err)
	}
	sid := identity.SandboxID("alice", "t2")
	if _, ok, _ := p.Record(ctx, sid); ok || e.be.count(e.be.creates, sid) != 0 {
		t.Fatal("a refused create left a record or a sandbox")
	}
	if n, err := rdb.ZCard(ctx, statedb.NewKeys("", 0).Creating()).Result(); err != nil || n != 0 {
		t.Fatalf("capacity reservations left: %d %v", n, err)
	}
	// Another user has their own budget.
	if _, o, err := p.Acquire(ctx, "bob", "t2"); err != nil || o != OutcomeCold {
		t.Fatalf("bob: %v %v", o, err)
	}
	// An admin's create (exempt from the per-user limits) is not counted.
	asked := len(lim.asked)
	if _, o, err := p.Acquire(WithoutUserQuota(ctx), "alice", "t3"); err != nil || o != OutcomeCold {
		t.Fatalf("admin create over alice's rate: %v %v", o, err)
	}
	if len(lim.asked) != asked {
		t.Fatal("the limiter was asked for an exempt create")
	}
}
