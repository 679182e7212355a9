package pool

import (
	"context"
	"testing"
	"time"
)

// TestLifetimeDestroysBusySandboxes: a sandbox whose command never ends
// is spared by the reaper for good; max_lifetime destroys it anyway, and
// only once it is that old. Active and warm ones alike.
func TestLifetimeDestroysBusySandboxes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: time.Minute, MaxLifetime: time.Hour})
	p := e.replica()
	ctx := context.Background()
	e.be.commands.Store(1) // every sandbox runs a command forever
	old, _, err := p.Acquire(ctx, "u", "old")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(30 * time.Minute)
	young, _, err := p.Acquire(ctx, "u", "young")
	if err != nil {
		t.Fatal(err)
	}
	warm, _, err := p.Acquire(ctx, "u", "warm")
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if err := p.Release(ctx, "u", "warm"); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	e.clock.Advance(31 * time.Minute) // old: 61m; young and warm: 31m
	if n, err := NewReaper(p).Pass(ctx); err != nil || n != 1 {
		t.Fatalf("reaper: %d, %v; want only the idle warm one", n, err) // the busy ones are spared
	}
	if n, err := NewLifetime(p).Pass(ctx); err != nil || n != 1 {
		t.Fatalf("lifetime pass destroyed %d, %v; want the old one", n, err)
	}
	if e.be.count(e.be.destroys, old.SandboxID) != 1 || e.be.count(e.be.destroys, young.SandboxID) != 0 {
		t.Fatal("wrong sandbox destroyed")
	}
	if _, ok, _ := p.Record(ctx, old.SandboxID); ok {
		t.Fatal("record of the over-age sandbox remains")
	}
	// The warm one was reaped as idle above; make another warm one old.
	if e.be.count(e.be.destroys, warm.SandboxID) != 1 {
		t.Fatal("the warm sandbox was not reaped as idle")
	}
	e.clock.Advance(30 * time.Minute) // young: 61m
	if n, err := NewLifetime(p).Pass(ctx); err != nil || n != 1 || e.be.count(e.be.destroys, young.SandboxID) != 1 {
		t.Fatalf("lifetime pass destroyed %d, %v; want the young one, now old", n, err)
	}
}

func TestLifetimeWarmAndDisabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		max  time.Duration
		want int
	}{
		{"warm over age", time.Hour, 1},
		{"disabled", -1, 0},
		{"default 24h not reached", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{IdleTimeout: -1, MaxLifetime: tc.max})
			p := e.replica()
			ctx := context.Background()
			r, _, err := p.Acquire(ctx, "u", "t")
			if err != nil {
				t.Fatal(err)
			}
			p.Wait()
			if err := p.Release(ctx, "u", "t"); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(2 * time.Hour)
			if n, err := NewLifetime(p).Pass(ctx); err != nil || n != tc.want || e.be.count(e.be.destroys, r.SandboxID) != tc.want {
				t.Fatalf("destroyed %d, %v; want %d", n, err, tc.want)
			}
		})
	}
}

// TestActivityProbeSendsBusyIdleAfter: the sandbox server learns the
// gateway's busy_idle_after from each probe (no image change needed).
func TestActivityProbeSendsBusyIdleAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  time.Duration
		want string
	}{{0, "30m0s"}, {90 * time.Second, "1m30s"}, {-1, "0s"}} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{IdleTimeout: time.Minute, BusyIdleAfter: tc.cfg})
			p := e.replica()
			ctx := context.Background()
			r, _, err := p.Acquire(ctx, "u", "t")
			if err != nil {
				t.Fatal(err)
			}
			p.Wait()
			rec, _, _ := p.Record(ctx, r.SandboxID)
			if _, err := p.probe.busy(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if got, _ := e.be.idleAfter.Load().(string); got != tc.want {
				t.Fatalf("busy_idle_after = %q, want %q", got, tc.want)
			}
		})
	}
}
