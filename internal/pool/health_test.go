package pool

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/events"
)

// The health check destroys a sandbox whose server stops answering after
// HealthFailures probes in a row (two replicas serving it count each, one
// destroys), with cause failed_health; the thread's next request gets a
// new sandbox. A slow answer within the timeout is healthy, and a frozen
// sandbox (it cannot answer) is never judged.
func TestHealthDestroysSandboxThatStopsAnswering(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		answerIn time.Duration
		frozen   bool
		want     int // destroys after three passes of each replica
	}{
		{"hung", time.Hour, false, 1},
		{"slow within the timeout", timeout / 2, false, 0},
		{"frozen", time.Hour, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{HealthFailures: 2, HealthTimeout: timeout})
			rec := &recorder{}
			a := e.replicaWith(func(d *Deps) { d.Events = rec })
			b := e.replicaWith(func(d *Deps) { d.Events = rec })
			r, _, err := a.Acquire(ctx, "u", "t")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := b.Acquire(ctx, "u", "t"); err != nil {
				t.Fatal(err)
			}
			a.Wait()
			if tc.frozen {
				now := e.clock.Now()
				if ok, err := a.store.Freeze(ctx, r.SandboxID, r.Incarnation, now, now); !ok || err != nil {
					t.Fatalf("freeze mark: %v %v", ok, err)
				}
			}
			e.be.answerIn.Store(int64(tc.answerIn))
			ha, hb := NewHealth(a), NewHealth(b)
			n := 0
			for range 3 {
				for _, h := range []*Health{ha, hb} {
					d, err := h.Pass(ctx)
					if err != nil {
						t.Fatal(err)
					}
					n += d
				}
			}
			a.Wait()
			b.Wait()
			if n != tc.want || e.be.count(e.be.destroys, r.SandboxID) != tc.want {
				t.Fatalf("destroyed %d (backend: %d), want %d", n, e.be.count(e.be.destroys, r.SandboxID), tc.want)
			}
			if tc.want == 0 {
				return
			}
			got := rec.of("t")
			if last := got[len(got)-1]; last.Type != events.Destroyed || last.Cause != string(ReasonFailedHealth) || last.Incarnation != r.Incarnation {
				t.Fatalf("last event %+v, want destroyed (failed_health) of %s", last, r.Incarnation)
			}
			e.be.answerIn.Store(0)
			if r2, o, err := b.Acquire(ctx, "u", "t"); err != nil || o != OutcomeCold || r2.Incarnation == r.Incarnation {
				t.Fatalf("next request: %v %v", o, err)
			}
		})
	}
}

// A pass spreads its probes over the interval: at 5,000 sandboxes one
// burst of them held both cores and every request arriving meanwhile.
func TestHealthSpreadsItsProbes(t *testing.T) {
	t.Parallel()
	const n, interval = 5, time.Second
	e := newEnv(t, Config{HealthInterval: interval})
	a := e.replica()
	for i := range n {
		if _, _, err := a.Acquire(ctx, "u", "t"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	a.Wait()
	e.be.probed.Lock()
	e.be.probed.at = nil
	e.be.probed.Unlock()
	if d, err := NewHealth(a).Pass(ctx); d != 0 || err != nil {
		t.Fatalf("pass: %d destroyed, %v", d, err)
	}
	e.be.probed.Lock()
	at := slices.Clone(e.be.probed.at)
	e.be.probed.Unlock()
	if len(at) != n {
		t.Fatalf("%d probes, want %d", len(at), n)
	}
	slices.SortFunc(at, time.Time.Compare)
	// The last starts at (n-1)/n of the spread: 640 ms here.
	if span, want := at[n-1].Sub(at[0]), interval*healthSpread/10*(n-1)/n; span < want-50*time.Millisecond {
		t.Fatalf("probes arrived within %s of each other, want them spread over about %s", span, want)
	}
}
