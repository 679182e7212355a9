package pool

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// every runs pass each interval until ctx ends. A pass that fails or panics
// is logged (a panic once, with its stack) and the loop goes on: one bad
// sandbox must not stop the reaper.
func every(ctx context.Context, log *slog.Logger, name string, interval time.Duration, pass func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := runPass(ctx, interval, pass); err != nil && ctx.Err() == nil {
				log.Warn(name+" pass failed", "err", err)
			}
		}
	}
}

func runPass(ctx context.Context, interval time.Duration, pass func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	// A pass may take longer than its interval (slow destroys), not forever.
	ctx, cancel := context.WithTimeout(ctx, max(interval*10, time.Minute))
	defer cancel()
	return pass(ctx)
}
