package pool

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/events"
)

// Destroys the pool decides itself reach their event with their cause:
// max_lifetime (the lifetime loop), vanished (the reconciler finds the
// sandbox dead behind the gateway's back), options (the thread's create
// options changed under a running sandbox) and quota (the user, at
// max_sandboxes_per_user, creates another: its warm sandbox goes), and
// interrupted (the reconciler finishes a destroy a dead replica claimed).
func TestDestroyedEventCauses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause string
		cfg   Config
		do    func(t *testing.T, e *env, p *Pool, sid string)
	}{
		{string(ReasonMaxLifetime), Config{MaxLifetime: time.Hour}, func(t *testing.T, e *env, p *Pool, _ string) {
			e.clock.Advance(61 * time.Minute)
			if n, err := NewLifetime(p).Pass(ctx); n != 1 || err != nil {
				t.Fatalf("lifetime: %d, %v", n, err)
			}
		}},
		{ReasonVanished, Config{MaxSandboxes: -1}, func(t *testing.T, e *env, p *Pool, sid string) {
			e.be.kill(sid)
			if rep, err := NewReconciler(p).Pass(ctx); rep.Dropped != 1 || err != nil {
				t.Fatalf("reconciler: %+v, %v", rep, err)
			}
		}},
		{string(ReasonInterrupted), Config{MaxSandboxes: -1}, func(t *testing.T, e *env, p *Pool, sid string) {
			rec, _, _ := p.Record(ctx, sid)
			if _, ok, err := p.store.Claim(ctx, sid, rec.Incarnation); !ok || err != nil { // a replica that died after its claim
				t.Fatalf("claim: %v %v", ok, err)
			}
			if _, err := NewReconciler(p).Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{string(ReasonQuota), Config{MaxSandboxes: -1, MaxSandboxesPerUser: 1}, func(t *testing.T, _ *env, p *Pool, _ string) {
			if err := p.Release(ctx, "u", "t"); err != nil {
				t.Fatal(err)
			}
			if _, o, err := p.Acquire(ctx, "u", "t2"); err != nil || o != OutcomeCold {
				t.Fatalf("create at the quota: %v %v", o, err)
			}
		}},
		{string(ReasonOptions), Config{}, func(t *testing.T, _ *env, p *Pool, _ string) {
			if err := p.SetOptions(ctx, "u", "t", Options{Env: map[string]string{"A": "1"}}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.cause, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.cfg)
			rec := &recorder{}
			p := e.replicaWith(func(d *Deps) { d.Events = rec })
			r, _, err := p.Acquire(ctx, "u", "t")
			if err != nil {
				t.Fatal(err)
			}
			p.Wait()
			tc.do(t, e, p, r.SandboxID)
			p.Wait()
			got := rec.of("t")
			last := got[len(got)-1]
			if last.Type != events.Destroyed || last.Cause != tc.cause || last.Incarnation != r.Incarnation {
				t.Fatalf("last event %+v, want destroyed (%s) of incarnation %s", last, tc.cause, r.Incarnation)
			}
		})
	}
}

// An OOM kill a sample finds is one oom_killed event fleet-wide, however
// many replicas sample the sandbox: two replicas serving it both see the
// count grow, one publishes (the claim in Redis); two more kills later are
// one more event counting two.
func TestSamplerPublishesOOMKillsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	be := &meterBackend{fakeBackend: e.be, clock: e.clock, cpu: map[string]float64{}, ooms: map[string]int64{}, ended: map[string]bool{}}
	rec := &recorder{}
	var replicas []*Pool
	var samplers []*Sampler
	for range 2 {
		p := e.replicaWith(func(d *Deps) { d.Backend = be; d.Events = rec })
		if _, _, err := p.Acquire(ctx, "u", "t"); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, p)
		samplers = append(samplers, NewSampler(p))
	}
	r, _, _ := replicas[0].Acquire(ctx, "u", "t")
	passes := func(kills int64) {
		t.Helper()
		be.mu.Lock()
		be.ooms[r.Incarnation] = kills
		be.mu.Unlock()
		for i, s := range samplers {
			e.clock.Advance(time.Second)
			if err := s.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			replicas[i].Wait()
		}
	}
	passes(0)
	passes(1)
	passes(1)
	passes(3)
	var got []events.Event
	for _, ev := range rec.of("t") {
		if ev.Type == events.OOMKilled {
			got = append(got, ev)
		}
	}
	if len(got) != 2 || got[0].Count != 1 || got[1].Count != 2 {
		t.Fatalf("oom_killed events %+v, want two, counting 1 then 2", got)
	}
	for _, ev := range got {
		if ev.Cause != CauseOOM || ev.SandboxID != r.SandboxID || ev.Incarnation != r.Incarnation || ev.User != "u" {
			t.Errorf("oom_killed event %+v lacks its cause or the sandbox's identity", ev)
		}
	}
}
