package events_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/events"
)

// A loop of 100 refusals in one sandbox becomes one event in the stream
// per window: the first at once (count 1), the next, after the window,
// counting itself and the 99 held back; another sandbox's refusal in the
// same window is its own (the limit is per sandbox).
func TestThrottleLimitsPerKey(t *testing.T) {
	t.Parallel()
	b, _ := newBus(t, client(t), events.Config{})
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	th := events.NewThrottle(b, 10*time.Second)
	th.SetClock(clock)
	denied := func(sid, host string) {
		th.Offer(t.Context(), sid, events.Event{Type: events.EgressDenied, SandboxID: sid, Cause: "not_allowed", Host: host})
	}
	for range 100 {
		denied("a", "loop.example")
	}
	denied("b", "other.example")
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	denied("a", "last.example")

	var got []events.Event
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		var err error
		if got, err = b.Read(t.Context(), events.Position{}, nil, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	count := map[string][]int64{}
	for _, e := range got {
		count[e.SandboxID+" "+e.Host] = append(count[e.SandboxID+" "+e.Host], e.Count)
	}
	want := map[string]int64{"a loop.example": 1, "b other.example": 1, "a last.example": 100}
	if len(got) != len(want) {
		t.Fatalf("%d events in the stream, want %d: %+v", len(got), len(want), got)
	}
	for k, n := range want {
		if c := count[k]; len(c) != 1 || c[0] != n {
			t.Errorf("%s: counts %v, want one event counting %d", k, c, n)
		}
	}
}
