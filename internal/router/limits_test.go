package router

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/pool"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Rate{
		"60/1m": {60, time.Minute}, "5/s": {5, time.Second}, " 10 / 1h ": {10, time.Hour}, "3/90s": {3, 90 * time.Second}, "0": {N: -1},
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", in, got, err)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("%q: round trip %+v %v", in, back, err)
		}
	}
	for _, bad := range []string{"", "60", "x/1m", "-1/1m", "0/1m", "5/", "5/0s", "5/-1s", "5/fortnight"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The router answers the pool's create-rate refusal with 429 and its wait.
func TestCreateRateRefusalIs429WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := statusOf(fmt.Errorf("acquire: %w", &pool.RateLimitError{User: "alice", RetryAfter: 2500 * time.Millisecond}))
	if e.status != 429 || e.retryAfter != 3 {
		t.Fatalf("rate limit error: %+v", e)
	}
	if got := (LimitsConfig{}).EffectiveCreateRate(); got != DefaultCreateRate {
		t.Fatalf("zero create rate = %v, want the default %v", got, DefaultCreateRate)
	}
}

func TestInFlightLimitIsPerUserAndReleased(t *testing.T) {
	t.Parallel()
	l := NewLimits(LimitsConfig{MaxRequests: 2})
	alice, bob := auth.NewPrincipal("alice", auth.ScopeThreads, nil), auth.NewPrincipal("bob", auth.ScopeThreads, nil)
	a1, err1 := l.begin(alice)
	a2, err2 := l.begin(alice)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := l.begin(alice); !errors.Is(err, errTooManyRequests) {
		t.Fatalf("third: %v", err)
	}
	if b, err := l.begin(bob); err != nil {
		t.Fatalf("bob: %v", err)
	} else {
		l.end(b)
	}
	l.end(a1)
	if a3, err := l.begin(alice); err != nil {
		t.Fatalf("after one ended: %v", err)
	} else {
		l.end(a3)
	}
	l.end(a2)
	// Concurrent begin/end keep the count exact.
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, err := l.begin(alice); err == nil {
				l.end(s)
			}
		}()
	}
	wg.Wait()
	if n := l.state("alice").inflight.Load(); n != 0 {
		t.Fatalf("%d requests still counted in flight", n)
	}
}

func TestUserStateIsBounded(t *testing.T) {
	t.Parallel()
	l := NewLimits(LimitsConfig{})
	clock := time.Unix(1_000_000, 0)
	l.now = func() time.Time { return clock }
	busy := auth.NewPrincipal("busy", auth.ScopeThreads, nil)
	slot, err := l.begin(busy)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxTrackedUsers + 1000 {
		if i == maxTrackedUsers/2 {
			clock = clock.Add(time.Hour) // the first half is idle by now
		}
		l.state(fmt.Sprintf("u%d", i))
	}
	l.mu.RLock()
	n, kept := len(l.users), l.users["busy"] != nil
	l.mu.RUnlock()
	if n > maxTrackedUsers || !kept {
		t.Fatalf("%d users tracked (cap %d); busy user kept: %v", n, maxTrackedUsers, kept)
	}
	l.end(slot)
}
