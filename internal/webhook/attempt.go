package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxResponse is how much of an endpoint's answer is read (and dropped),
// so its connection can be reused.
const maxResponse = 64 << 10

// deliver posts one event to the endpoint until it answers 2xx or the
// event is MaxAge old, then finishes it. It returns early, leaving the
// event pending for a claim, when ctx ends (shutdown) or another replica
// took the event over.
func (d *delivery) deliver(ctx context.Context, m redis.XMessage) {
	defer d.recoverDelivery(m.ID)
	cfg := d.l.p.Config
	typ, body, ok := decode(m)
	if !ok || !d.e.wants(typ) {
		// Not for this endpoint (or not an event): done with, uncounted.
		d.finish(ctx, m.ID, "", nil)
		return
	}
	born := entryTime(m.ID)
	log := d.l.p.Log.With("endpoint", d.e.ID, "event", m.ID, "type", typ)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			sleep(ctx, backoff(cfg.Backoff, cfg.MaxBackoff, attempt-1))
			if ctx.Err() != nil || !d.touch(ctx, m.ID) {
				return
			}
		}
		err := d.post(ctx, m.ID, body)
		if err == nil {
			d.finish(ctx, m.ID, statDelivered, nil)
			return
		}
		if ctx.Err() != nil {
			return
		}
		d.count(ctx, statFailed)
		if time.Since(born) >= cfg.MaxAge {
			log.Warn("webhook event dead-lettered", "attempts", attempt, "err", err)
			d.finish(ctx, m.ID, statDead, []any{"id", m.ID, "event", body, "reason", err.Error(), "attempts", attempt})
			return
		}
		log.Debug("webhook attempt failed", "attempt", attempt, "err", err)
	}
}

// statusError is an endpoint's answer other than 2xx.
type statusError int

func (e statusError) Error() string { return "endpoint answered " + strconv.Itoa(int(e)) }

// post makes one signed attempt.
func (d *delivery) post(ctx context.Context, id string, body []byte) error {
	cfg := d.l.p.Config
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.e.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	setHeaders(req.Header, d.key, id, time.Now(), body)
	resp, err := d.l.p.Client.Do(req)
	if err != nil {
		// The URL (its query may hold the receiver's token) stays out of
		// logs and dead letters.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fmt.Errorf("unreachable: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp.StatusCode)
	}
	return nil
}

// finish acknowledges the event, counting stat (none when "") and keeping
// a dead letter when given, if this replica still held it (scriptFinish).
func (d *delivery) finish(ctx context.Context, id, stat string, dead []any) {
	cfg := d.l.p.Config
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	var err error
	if stat == "" {
		err = d.l.p.RDB.XAck(ctx, cfg.Keys.Stream, d.group, id).Err()
	} else {
		keep := "0"
		if dead != nil {
			keep = strconv.Itoa(cfg.DeadLetters)
		}
		args := append([]any{d.group, id, statField(d.e.ID, stat), keep}, dead...)
		err = scriptFinish.Run(ctx, d.l.p.RDB, []string{cfg.Keys.Stream, cfg.Keys.Stats, cfg.Keys.DeadPrefix + d.e.ID}, args...).Err()
	}
	if err != nil {
		// It stays pending: claimed and delivered again after ClaimIdle.
		d.l.p.Log.Warn("webhook event not acknowledged", "endpoint", d.e.ID, "event", id, "err", err)
	}
}

// touch keeps the event this replica's while it retries (scriptTouch).
func (d *delivery) touch(ctx context.Context, id string) bool {
	cfg := d.l.p.Config
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	n, err := scriptTouch.Run(ctx, d.l.p.RDB, []string{cfg.Keys.Stream}, d.group, id, cfg.Consumer).Int()
	if err != nil {
		d.l.p.Log.Warn("webhook retry stopped: redis", "endpoint", d.e.ID, "event", id, "err", err)
		return false
	}
	return n == 1
}

func (d *delivery) count(ctx context.Context, stat string) {
	cfg := d.l.p.Config
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := d.l.p.RDB.HIncrBy(ctx, cfg.Keys.Stats, statField(d.e.ID, stat), 1).Err(); err != nil {
		d.l.p.Log.Debug("webhook stat not counted", "endpoint", d.e.ID, "err", err)
	}
}

// backoff is the delay before retry n (1, 2, ...): base doubled per retry
// up to max, the upper half of it jittered so replicas' retries spread.
func backoff(base, maxDelay time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return d/2 + rand.N(d/2+1)
}

// entryTime is when a stream entry was added (its id's milliseconds).
func entryTime(id string) time.Time {
	ms, _ := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64)
	return time.UnixMilli(ms)
}
