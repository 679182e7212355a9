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
	var logs testutil.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithCancel(t.Context())
	var passes atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, log, "test", time.Millisecond, func(context.Context) error {
			switch passes.Add(1) {
			case 1:
				panic("deliberate test panic")
			case 2:
				return errors.New("plain failure")
			case 3:
				cancel()
			}
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("loop stopped after %d passes", passes.Load())
	}
	out := logs.String()
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
