package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// failureLogEvery is how often a loop whose passes keep failing logs it:
// a Redis outage fails every pass of every loop, each interval.
const failureLogEvery = time.Minute

// every runs pass each interval until ctx ends. A pass that fails or panics
// is logged (a panic each time, with its stack; plain failures the first at
// once, then at most one a failureLogEvery with the count so far) and the
// loop goes on: one bad sandbox must not stop the reaper.
func every(ctx context.Context, log *slog.Logger, name string, interval time.Duration, pass func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failures := failureLog{log: log, name: name}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := runPass(ctx, interval, pass)
			if ctx.Err() != nil {
				return
			}
			var p *panicError
			if errors.As(err, &p) {
				log.Error(name+" pass panicked", "err", err)
				continue
			}
			failures.pass(time.Now(), err)
		}
	}
}

// failureLog logs the plain failures of one loop's passes.
type failureLog struct {
	log  *slog.Logger
	name string
	// failed counts the passes failed in a row, logged the last at
	// (zero: not logged since the loop last succeeded).
	failed   int
	loggedAt time.Time
}

// pass records the outcome of a pass that ended at now.
func (f *failureLog) pass(now time.Time, err error) {
	if err == nil {
		if f.failed > 0 {
			f.log.Info(f.name+" passes succeed again", "failed_passes", f.failed)
		}
		f.failed, f.loggedAt = 0, time.Time{}
		return
	}
	f.failed++
	if f.loggedAt.IsZero() || now.Sub(f.loggedAt) >= failureLogEvery {
		f.log.Warn(f.name+" pass failed", "err", err, "failed_passes", f.failed)
		f.loggedAt = now
	}
}

// panicError is a pass that panicked, with its stack.
type panicError struct{ msg string }

func (p *panicError) Error() string { return p.msg }

func runPass(ctx context.Context, interval time.Duration, pass func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{msg: fmt.Sprintf("panic: %v\n%s", r, debug.Stack())}
		}
	}()
	// A pass may take longer than its interval (slow destroys), not forever.
	ctx, cancel := context.WithTimeout(ctx, max(interval*10, time.Minute))
	defer cancel()
	return pass(ctx)
}
