package pool

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// A pass that panics is logged once with its stack and the loop goes on.
func TestEveryLogsAPanicWithItsStackAndGoesOn(t *testing.T) {
	t.Parallel()
	out := runEvery(t, func(n int32) error {
		switch n {
		case 1:
			panic("deliberate test panic")
		case 2:
			return errors.New("plain failure")
		}
		return nil
	}, 3)
	if n := strings.Count(out, "deliberate test panic"); n != 1 {
		t.Fatalf("panic logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "goroutine ") || !strings.Contains(out, "loop_test.go") {
		t.Fatalf("panic logged without its stack:\n%s", out)
	}
	if !strings.Contains(out, "plain failure") || strings.Count(out, "[running]:") != 1 {
		t.Fatalf("the loop did not go on after the panic, or a plain failure carries a stack:\n%s", out)
	}
}

// Passes that keep failing are logged once, not each interval, with how
// many failed; the first success says so, and the next failure is logged
// at once again.
func TestEveryRateLimitsFailedPasses(t *testing.T) {
	t.Parallel()
	out := runEvery(t, func(n int32) error {
		switch {
		case n <= 50:
			return errors.New("redis down")
		case n == 52:
			return errors.New("redis down again")
		}
		return nil
	}, 53)
	if n := strings.Count(out, `"redis down"`); n != 1 {
		t.Fatalf("50 failed passes in a row logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, `"msg":"test passes succeed again","failed_passes":50`) {
		t.Fatalf("the first success after 50 failures not logged with their count:\n%s", out)
	}
	if !strings.Contains(out, `"err":"redis down again","failed_passes":1`) {
		t.Fatalf("a failure after a success not logged at once:\n%s", out)
	}
}

// Within one failing run, a failure is logged again once failureLogEvery
// has passed, with the count so far.
func TestFailureLogLogsAgainAfterItsPeriod(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	f := failureLog{log: slog.New(slog.NewJSONHandler(&logs, nil)), name: "test"}
	t0 := time.Unix(1000, 0)
	for i := range 10 {
		f.pass(t0.Add(time.Duration(i)*failureLogEvery/4), errors.New("down"))
	}
	// Logged at 0, 4 and 8 quarters.
	if n := strings.Count(logs.String(), `"msg":"test pass failed"`); n != 3 {
		t.Fatalf("10 failures over 2.25 periods logged %d times, want 3:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"failed_passes":9`) {
		t.Fatalf("the third line lacks the count so far:\n%s", logs.String())
	}
}

// runEvery runs every with pass (given the pass's number, from 1) until the
// pass numbered last, and returns what the loop logged.
func runEvery(t *testing.T, pass func(n int32) error, last int32) string {
	t.Helper()
	var logs testutil.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var passes atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, log, "test", time.Millisecond, func(context.Context) error {
			n := passes.Add(1)
			if n == last {
				cancel()
				return nil
			}
			return pass(n)
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("loop stopped after %d passes", passes.Load())
	}
	return logs.String()
}
