package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
)

const (
	// readBlock is how long one XREADGROUP waits for a new event; it paces
	// an idle worker and lets it notice that ctx ended.
	readBlock = time.Second
	// retryDelay paces a worker after Redis failed it.
	retryDelay = time.Second
	// eventField is the events stream's one field (package events).
	eventField = "e"
)

// LoopParams are what the delivery loop uses.
type LoopParams struct {
	RDB redis.UniversalClient
	// Config is defaulted (Service's).
	Config Config
	Client *http.Client
	// Endpoints lists the endpoints to deliver to now.
	Endpoints func(context.Context) ([]Endpoint, error)
	Log       *slog.Logger
}

// Loop is this replica's delivery to every endpoint: one worker per
// endpoint, started, stopped and restarted (a changed endpoint) as the
// endpoints are reloaded every Config.Refresh.
type Loop struct{ p LoopParams }

// NewLoop builds the loop.
func NewLoop(p LoopParams) *Loop { return &Loop{p: p} }

// Loop is the service's delivery loop.
func (s *Service) Loop() *Loop {
	return NewLoop(LoopParams{RDB: s.rdb, Config: s.cfg, Client: s.client, Endpoints: s.endpoints, Log: s.log})
}

type running struct {
	e      Endpoint
	cancel context.CancelFunc
	done   chan struct{}
}

// Run delivers until ctx ends; then it waits for deliveries in flight
// (each bounded by Config.Timeout). What it did not finish stays pending
// in the groups, for another replica, or this one restarted, to claim.
func (l *Loop) Run(ctx context.Context) {
	workers := map[string]*running{}
	stop := func(w *running) { w.cancel(); <-w.done }
	defer func() {
		for _, w := range workers {
			stop(w)
		}
	}()
	tick := time.NewTicker(l.p.Config.Refresh)
	defer tick.Stop()
	for {
		eps, err := l.p.Endpoints(ctx)
		if err != nil && ctx.Err() == nil {
			l.p.Log.Warn("webhook endpoints not reloaded", "err", err)
		}
		if err == nil {
			want := map[string]bool{}
			for _, e := range eps {
				want[e.ID] = true
				if w, ok := workers[e.ID]; ok && !changed(w.e, e) {
					continue
				} else if ok {
					stop(w)
				}
				wctx, cancel := context.WithCancel(ctx)
				w := &running{e: e, cancel: cancel, done: make(chan struct{})}
				workers[e.ID] = w
				go func() { defer close(w.done); l.work(wctx, e) }()
			}
			for id, w := range workers {
				if !want[id] {
					stop(w)
					delete(workers, id)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func changed(a, b Endpoint) bool {
	return a.URL != b.URL || a.Secret != b.Secret || !slices.Equal(a.Events, b.Events)
}

// work delivers one endpoint's events: those whose replica died first
// (XAUTOCLAIM, every quarter of ClaimIdle), else new ones (XREADGROUP),
// each in its own goroutine, at most Concurrency at once.
func (l *Loop) work(ctx context.Context, e Endpoint) {
	key, err := secretKey(e.Secret)
	if err != nil {
		return // Validate and Create refused it
	}
	cfg := l.p.Config
	d := &delivery{l: l, e: e, key: key, group: e.group()}
	if e.Source == SourceConfig {
		d.ensureGroup(ctx)
	}
	slots := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	claimEvery := cfg.ClaimIdle / 4
	var lastClaim time.Time
	cursor := "0-0"
	for ctx.Err() == nil {
		// Take a slot before reading: an event read is this replica's
		// to deliver, and must not wait for one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := int64(cfg.Concurrency - len(slots) + 1)
		msgs, err := d.next(ctx, &lastClaim, &cursor, claimEvery, free)
		<-slots
		if err != nil {
			if ctx.Err() == nil {
				l.p.Log.Warn("webhook read failed", "endpoint", e.ID, "err", err)
				// An API endpoint's group goes only with the endpoint (a
				// delete, or a flushed Redis, which took the endpoint too):
				// making it again would revive a deleted endpoint's group.
				if strings.HasPrefix(err.Error(), "NOGROUP") && e.Source == SourceConfig {
					d.ensureGroup(ctx)
				}
				sleep(ctx, retryDelay)
			}
			continue
		}
		for _, m := range msgs {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				d.deliver(ctx, m)
			}()
		}
	}
}

// delivery is one endpoint's worker state.
type delivery struct {
	l     *Loop
	e     Endpoint
	key   []byte
	group string
}

// next is the next batch: claimed from dead replicas when it is time to
// look, else new events.
func (d *delivery) next(ctx context.Context, lastClaim *time.Time, cursor *string, every time.Duration, n int64) ([]redis.XMessage, error) {
	cfg := d.l.p.Config
	rctx, cancel := context.WithTimeout(ctx, readBlock+cfg.Timeout)
	defer cancel()
	if time.Since(*lastClaim) >= every {
		msgs, next, err := d.l.p.RDB.XAutoClaim(rctx, &redis.XAutoClaimArgs{Stream: cfg.Keys.Stream, Group: d.group,
			Consumer: cfg.Consumer, MinIdle: cfg.ClaimIdle, Start: *cursor, Count: n}).Result()
		if err != nil {
			return nil, err
		}
		*cursor = next
		if next == "0-0" { // the whole pending list was scanned
			*lastClaim = time.Now()
		}
		if len(msgs) > 0 {
			d.l.p.Log.Info("webhook events taken over from a silent replica", "endpoint", d.e.ID, "count", len(msgs))
			return msgs, nil
		}
	}
	res, err := d.l.p.RDB.XReadGroup(rctx, &redis.XReadGroupArgs{Group: d.group, Consumer: cfg.Consumer,
		Streams: []string{cfg.Keys.Stream, ">"}, Count: n, Block: readBlock}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []redis.XMessage
	for _, s := range res {
		out = append(out, s.Messages...)
	}
	return out, nil
}

// ensureGroup creates the endpoint's group at the stream's end if it has
// none (a configured endpoint's first start, or a flushed Redis).
func (d *delivery) ensureGroup(ctx context.Context) {
	cfg := d.l.p.Config
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	err := d.l.p.RDB.XGroupCreateMkStream(ctx, cfg.Keys.Stream, d.group, "$").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") && ctx.Err() == nil {
		d.l.p.Log.Warn("webhook group not created", "endpoint", d.e.ID, "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// recoverDelivery logs a panic in one delivery; the event stays pending.
func (d *delivery) recoverDelivery(id string) {
	if r := recover(); r != nil {
		d.l.p.Log.Error("webhook delivery panicked", "endpoint", d.e.ID, "event", id, "panic", r, "stack", string(debug.Stack()))
	}
}

// decode reads an events stream entry: its type and the delivery's body,
// the event with its id.
func decode(m redis.XMessage) (events.Type, []byte, bool) {
	s, _ := m.Values[eventField].(string)
	var ev events.Event
	if json.Unmarshal([]byte(s), &ev) != nil {
		return "", nil, false
	}
	ev.ID = m.ID
	body, err := json.Marshal(ev)
	return ev.Type, body, err == nil
}
