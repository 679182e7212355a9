package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
)

// activityPathFor is sandboxspec.ActivityPath with the busy_idle_after the
// sandbox server applies (0 there: only a stop ends busy). A server that
// predates the parameter ignores it.
func activityPathFor(busyIdleAfter time.Duration) string {
	return sandboxspec.ActivityPath + "?" + sandboxspec.BusyIdleAfterParam + "=" + max(busyIdleAfter, 0).String()
}

// activityProbeTimeout bounds the probe: a sandbox too slow to answer it
// cannot tell.
const activityProbeTimeout = 2 * time.Second

// prober asks a sandbox what runs in it (sandboxspec.ActivityPath), and
// renews the activity of one that is busy.
type prober struct {
	busyIdleAfter time.Duration
	newRT         func(socket string) http.RoundTripper
	store         activityToucher
	clock         Clock
}

// activityToucher moves sandboxes' activity to now.
type activityToucher interface {
	Touch(ctx context.Context, entries []state.TouchEntry, now time.Time) ([]int, error)
}

// activity asks rec's sandbox what runs in it. An error means it cannot
// tell: a third-party image without sandboxspec.ActivityPath, a sandbox that does not
// answer (a frozen one never does: do not ask it).
func (p *prober) activity(ctx context.Context, rec state.Record) (sandboxspec.Activity, error) {
	ctx, cancel := context.WithTimeout(ctx, activityProbeTimeout)
	defer cancel()
	base, socket := backend.HTTPBase(rec.URL)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+activityPathFor(p.busyIdleAfter), nil)
	if err != nil {
		return sandboxspec.Activity{}, fmt.Errorf("activity probe: %w", err)
	}
	if rec.Secret != "" {
		req.Header.Set(sandboxspec.SecretHeader, rec.Secret)
	}
	rt := p.newRT(socket)
	defer func() {
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return sandboxspec.Activity{}, fmt.Errorf("activity probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sandboxspec.Activity{}, fmt.Errorf("activity probe answered %d", resp.StatusCode)
	}
	var env struct {
		Data sandboxspec.Activity `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&env); err != nil {
		return sandboxspec.Activity{}, fmt.Errorf("activity probe: %w", err)
	}
	return env.Data, nil
}

// busy is nil when rec's sandbox runs nothing; ErrBusy when it runs
// something or cannot tell (unknown is not idle: such a sandbox is never
// frozen or restored under). running says which: the freezer and the
// reaper spare a running sandbox and renew its activity.
func (p *prober) busy(ctx context.Context, rec state.Record) (running bool, err error) {
	a, err := p.activity(ctx, rec)
	if err != nil {
		return false, fmt.Errorf("%w: it cannot tell: %w", ErrBusy, err)
	}
	if a.Running() {
		return true, fmt.Errorf("%w: %d command(s) running, %d request(s) in flight", ErrBusy, a.Commands, a.Requests)
	}
	return false, nil
}

// spareRunning renews the activity of rec's sandbox if it runs a command
// or serves a request, as a request in flight through a replica would be:
// idle expiry and the freezer leave it alone until it has been quiet that
// long. true if it was spared.
func (p *prober) spareRunning(ctx context.Context, rec state.Record) bool {
	if !rec.Frozen.IsZero() {
		return false // stopped: nothing runs, and it could not answer
	}
	running, _ := p.busy(ctx, rec)
	if running {
		p.renew(ctx, rec)
	}
	return running
}

// renew moves rec's activity to now, as the toucher does for a request in
// flight; a failure only means it is looked at again sooner.
func (p *prober) renew(ctx context.Context, rec state.Record) {
	_, _ = p.store.Touch(ctx, []state.TouchEntry{{SandboxID: rec.SandboxID, Incarnation: rec.Incarnation}}, p.clock.Now())
}
