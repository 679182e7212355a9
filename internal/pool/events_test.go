package pool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
)

// recorder is a Publisher that keeps what it is given.
type recorder struct {
	mu  sync.Mutex
	got []events.Event
}

func (r *recorder) Publish(_ context.Context, e events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, e)
}

// of returns the events of thread, in order.
func (r *recorder) of(thread string) []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Event
	for _, e := range r.got {
		if e.Thread == thread {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func types(es []events.Event) []events.Type {
	out := make([]events.Type, len(es))
	for i, e := range es {
		out[i] = e.Type
	}
	return out
}

// waitFor polls until thread's events include t.
func (r *recorder) waitFor(t *testing.T, thread string, typ events.Type) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(types(r.of(thread)), typ) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s event for %s; got %v", typ, thread, types(r.of(thread)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A create queued at the hard cap, its start and readiness, a release, an
// eviction, a client's destroy, the reaper's and a failed create are each
// published once, with the sandbox's identity; a cached acquire publishes
// nothing.
func TestPoolPublishesLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: 1, HardCap: true, AcquireTimeout: 20 * time.Second, IdleTimeout: 10 * time.Minute})
	rec := &recorder{}
	var reasonOf error
	p := e.replicaWith(func(d *Deps) {
		d.Events = rec
		d.FailReason = func(err error) string { reasonOf = err; return "sandbox_start_failed: told to the client" }
	})

	a, _, err := p.Acquire(ctx, "u", "a")
	if err != nil {
		t.Fatal(err)
	}
	p.Wait() // its ready event and lock release come after it answered
	n := rec.count()
	if _, o, _ := p.Acquire(ctx, "u", "a"); o != OutcomeHit || rec.count() != n {
		t.Fatalf("cached acquire (%s) published %d events", o, rec.count()-n)
	}

	// b waits for room: a is released warm, then evicted for b.
	done := make(chan error, 1)
	go func() { _, _, err := p.Acquire(ctx, "u", "b"); done <- err }()
	rec.waitFor(t, "b", events.Queued)
	if err := p.Release(ctx, "u", "a"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("queued create: %v", err)
	}
	if err := p.DestroyThread(ctx, "u", "b", ReasonClient); err != nil {
		t.Fatal(err)
	}

	if _, _, err := p.Acquire(ctx, "u", "c"); err != nil {
		t.Fatal(err)
	}
	p.Wait() // c's lock is released after it answered: the reaper skips a locked sandbox
	e.clock.Advance(11 * time.Minute)
	if n, err := NewReaper(p).Pass(ctx); err != nil || n != 1 {
		t.Fatalf("reaper: %d, %v", n, err)
	}

	e.be.mu.Lock()
	e.be.createErr = errors.New("engine said no at /var/lib/secret/path")
	e.be.mu.Unlock()
	if _, _, err := p.Acquire(ctx, "u", "d"); err == nil {
		t.Fatal("create did not fail")
	}

	p.Wait()
	type want struct {
		types  []events.Type
		reason string // of the last event
	}
	for thread, w := range map[string]want{
		"a": {[]events.Type{events.Starting, events.Ready, events.Released, events.Destroyed}, string(ReasonEvicted)},
		"b": {[]events.Type{events.Queued, events.Starting, events.Ready, events.Destroyed}, string(ReasonClient)},
		"c": {[]events.Type{events.Starting, events.Ready, events.Destroyed}, string(ReasonIdle)},
		"d": {[]events.Type{events.Starting, events.Failed}, "sandbox_start_failed: told to the client"},
	} {
		got := rec.of(thread)
		if !slices.Equal(types(got), w.types) {
			t.Errorf("%s: events %v, want %v", thread, types(got), w.types)
			continue
		}
		if last := got[len(got)-1]; last.Cause != w.reason {
			t.Errorf("%s: last reason %q, want %q", thread, last.Cause, w.reason)
		}
		for _, ev := range got {
			if ev.SandboxID != identity.SandboxID("u", thread) || ev.User != "u" || ev.Backend != "fake" {
				t.Errorf("%s: event %+v lacks the sandbox's identity", thread, ev)
			}
		}
	}
	if a.SandboxID != identity.SandboxID("u", "a") {
		t.Fatal("sandbox id formula changed")
	}
	if !errors.Is(reasonOf, ErrCreate) {
		t.Errorf("FailReason was given %v, want the ErrCreate the client gets", reasonOf)
	}
}

// A pull's many progress reports become few Pulling events between
// starting and ready, the first and the last (with the full size) always.
func TestPullProgressIsPaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	const reports = 200
	for i := range reports {
		e.be.progress = append(e.be.progress, backend.Progress{Step: backend.StepPulling, Bytes: int64(i), Total: reports})
	}
	e.be.progress = append(e.be.progress, backend.Progress{Step: backend.StepPulling, Bytes: reports, Total: reports, Done: true})
	rec := &recorder{}
	p := e.replicaWith(func(d *Deps) { d.Events = rec })
	start := time.Now()
	if _, _, err := p.Acquire(ctx, "u", "t"); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	got := rec.of("t")
	ts := types(got)
	if len(ts) < 4 || ts[0] != events.Starting || ts[len(ts)-1] != events.Ready {
		t.Fatalf("events %v, want starting, pulling..., ready", ts)
	}
	pulls := got[1 : len(got)-1]
	// One per 250 ms of the create, plus the first and the last.
	if most := 2 + int(time.Since(start)/pullEventEvery); len(pulls) > most {
		t.Errorf("%d pulling events in %s, want at most %d", len(pulls), time.Since(start), most)
	}
	for _, ev := range pulls {
		if ev.Type != events.Pulling || ev.Total != reports {
			t.Fatalf("pulling event %+v", ev)
		}
	}
	if pulls[0].Bytes != 0 || pulls[len(pulls)-1].Bytes != reports {
		t.Errorf("first/last pulling bytes %d/%d, want 0/%d", pulls[0].Bytes, pulls[len(pulls)-1].Bytes, reports)
	}
}

// Each cause the pool knows reaches its event, with the sandbox's
// incarnation: ready cold, then warm after a release; frozen idle (the
// freezer) and on demand (FreezeThread), each thawed on demand by a
// request; destroyed with its reason.
func TestEventCauses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{FreezeAfter: 10 * time.Second, CacheTTL: 10 * time.Millisecond,
		TouchInterval: 10 * time.Millisecond, IdleTimeout: time.Hour})
	rec := &recorder{}
	p := e.replicaWith(func(d *Deps) { d.Events = rec })
	acquire := func(want Outcome) {
		t.Helper()
		if _, o, err := p.Acquire(ctx, "u", "t"); err != nil || o != want {
			t.Fatalf("acquire: %s, %v; want %s", o, err, want)
		}
		p.Wait()
	}
	acquire(OutcomeCold)
	if err := p.Release(ctx, "u", "t"); err != nil {
		t.Fatal(err)
	}
	acquire(OutcomeWarm)
	e.clock.Advance(20 * time.Second)
	if n, err := NewFreezer(p).Pass(ctx); n != 1 || err != nil {
		t.Fatalf("freezer: %d, %v", n, err)
	}
	acquire(OutcomeThawed)
	if err := NewHolder(p).FreezeThread(ctx, "u", "t"); err != nil {
		t.Fatalf("freeze on demand: %v", err)
	}
	acquire(OutcomeThawed)
	if err := p.DestroyThread(ctx, "u", "t", ReasonAdmin); err != nil {
		t.Fatal(err)
	}
	p.Wait()

	type step struct {
		typ   events.Type
		cause string
	}
	want := []step{{events.Starting, ""}, {events.Ready, "cold"}, {events.Released, ""}, {events.Ready, "warm"},
		{events.Frozen, CauseIdle}, {events.Thawed, CauseOnDemand}, {events.Frozen, CauseOnDemand},
		{events.Thawed, CauseOnDemand}, {events.Destroyed, string(ReasonAdmin)}}
	var got []step
	incarnation := ""
	for _, ev := range rec.of("t") {
		got = append(got, step{ev.Type, ev.Cause})
		if ev.Type == events.Starting || ev.Type == events.Released {
			continue // published before the record, or by sid alone
		}
		if ev.Incarnation == "" || incarnation != "" && ev.Incarnation != incarnation {
			t.Errorf("%s: incarnation %q, want the sandbox's one (%q)", ev.Type, ev.Incarnation, incarnation)
		}
		incarnation = ev.Incarnation
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
}

// A claimed pre-started sandbox is ready with cause prewarm and its
// template; a create the pool could not serve from one (env of its own)
// is cold, with the default template.
func TestReadyEventNamesPrewarmAndTemplate(t *testing.T) {
	t.Parallel()
	tpls := []Template{
		{Name: "py", Backend: backend.Template{Name: "py", Image: "py:1"}, Prewarm: 1},
		{Name: "node", Backend: backend.Template{Name: "node", Image: "node:1"}, Prewarm: 1},
	}
	e := newEnv(t, Config{Prewarm: 4, MaxSandboxes: -1, Templates: tpls, DefaultTemplate: "py"})
	rec := &recorder{}
	p := e.replicaWith(func(d *Deps) {
		d.Backend = &claimingBackend{fakeBackend: e.be}
		d.Events = rec
	})
	if err := NewPrewarmer(p).Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		thread string
		opts   Options
		want   Outcome
		tpl    string
	}{
		{"n", Options{Template: "node"}, OutcomePrewarm, "node"},
		{"p", Options{Env: map[string]string{"A": "1"}}, OutcomeCold, "py"},
	} {
		if err := p.SetOptions(t.Context(), "u", tc.thread, tc.opts); err != nil {
			t.Fatal(err)
		}
		if _, o, err := p.Acquire(t.Context(), "u", tc.thread); err != nil || o != tc.want {
			t.Fatalf("%s: %s, %v; want %s", tc.thread, o, err, tc.want)
		}
		p.Wait()
		got := rec.of(tc.thread)
		if len(got) == 0 || got[len(got)-1].Type != events.Ready {
			t.Fatalf("%s: events %v, want a ready last", tc.thread, types(got))
		}
		if r := got[len(got)-1]; r.Cause != string(tc.want) || r.Template != tc.tpl || r.Incarnation == "" {
			t.Errorf("%s: ready %+v, want cause %s, template %s, an incarnation", tc.thread, r, tc.want, tc.tpl)
		}
	}
}
