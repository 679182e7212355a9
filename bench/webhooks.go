package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/webhook"
	"github.com/sandgate/sandgate/internal/webhook/webhooktest"
)

func init() { register("webhooks", webhooksSuite) }

const (
	figWebhookP50 = "webhooks.latency.p50_ms"
	figWebhookP99 = "webhooks.latency.p99_ms"
)

// webhooksSuite measures webhook delivery latency, from an event's
// publication (its time) to the receiver's first 2xx of it, through a real
// redis-server and two delivering replicas (in this process, each with its
// own Redis connections and consumer name) to a receiver on loopback that
// verifies every signature: at a steady rate, then for a burst published
// at once (how long the backlog takes to drain).
func webhooksSuite(ctx context.Context) (Result, error) {
	tmp, err := os.MkdirTemp("", "bench-webhooks-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	srv, addr, err := startRedis(ctx, tmp)
	if err != nil {
		return Result{}, err
	}
	defer srv.stop(syscall.SIGKILL, 0)
	quiet := slog.New(slog.DiscardHandler)
	keys := webhook.Keys{Stream: "b{fleet}:events", Endpoints: "b{fleet}:webhooks", Stats: "b{fleet}:whstats", DeadPrefix: "b{fleet}:whdead:"}
	secret := webhook.NewSecret()
	var rows [][]string
	figures := map[string]float64{}
	for _, run := range []struct {
		name   string
		events int
		every  time.Duration // 0: all at once
	}{{"paced: one event, then 10 ms", 1000, 10 * time.Millisecond}, {"burst: 2000 published back to back", 2000, 0}} {
		rcv := webhooktest.New(secret)
		dial, err := egress.NewDialer(egress.Config{AllowAddresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		if err != nil {
			return Result{}, err
		}
		ep := webhook.Endpoint{ID: "bench", URL: rcv.URL(), Secret: secret}
		rctx, cancel := context.WithCancel(ctx)
		var stops []chan struct{}
		for i := range 2 {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			s, err := webhook.New(rdb, webhook.Config{Keys: keys, Endpoints: []webhook.Endpoint{ep}, Consumer: "r" + strconv.Itoa(i), Log: quiet}, dial)
			if err != nil {
				cancel()
				return Result{}, err
			}
			done := make(chan struct{})
			stops = append(stops, done)
			go func() { defer close(done); s.Loop().Run(rctx) }()
		}
		pub := redis.NewClient(&redis.Options{Addr: addr})
		defer pub.Close()
		// The group exists once a replica started: events before it are
		// not the endpoint's.
		for deadline := time.Now().Add(10 * time.Second); ; {
			g, _ := pub.XInfoGroups(ctx, keys.Stream).Result()
			if len(g) == 1 {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				return Result{}, fmt.Errorf("consumer group never created")
			}
			time.Sleep(10 * time.Millisecond)
		}
		bus, err := events.New(pub, events.Config{Stream: keys.Stream, Log: quiet})
		if err != nil {
			cancel()
			return Result{}, err
		}
		began := time.Now()
		for i := range run.events {
			bus.Publish(ctx, events.Event{Type: events.Ready, SandboxID: strconv.Itoa(i), Cause: "bench"})
			if run.every > 0 {
				time.Sleep(run.every)
			}
		}
		for deadline := time.Now().Add(2 * time.Minute); rcv.Counts().Events < run.events; {
			if time.Now().After(deadline) {
				cancel()
				return Result{}, fmt.Errorf("%s: %d of %d delivered in 2 minutes", run.name, rcv.Counts().Events, run.events)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(began)
		cancel()
		for _, d := range stops {
			<-d
		}
		c := rcv.Counts()
		rcv.Close()
		if c.BadSignature != 0 || c.BadID != 0 {
			return Result{}, fmt.Errorf("%s: %d bad signatures, %d bad ids", run.name, c.BadSignature, c.BadID)
		}
		_ = pub.Del(ctx, keys.Stream, keys.Stats).Err()
		st := summarize(rcv.Latencies())
		rows = append(rows, []string{run.name, strconv.Itoa(run.events), ms(st.P50), ms(st.P99), ms(st.Max),
			fmt.Sprintf("%.0f", float64(run.events)/took.Seconds()), strconv.Itoa(c.Duplicates)})
		if run.every > 0 {
			figures[figWebhookP50], figures[figWebhookP99] = msF(st.P50), msF(st.P99)
		}
	}
	return Result{
		Title:   "Webhook delivery latency (event published to receiver's 2xx)",
		Columns: []string{"run", "events", "p50 ms", "p99 ms", "max ms", "events/s", "duplicates"},
		Rows:    rows,
		Figures: figures,
		Notes: []string{
			"Two delivering replicas (in the bench process, consumers of one group) on a real redis-server, a receiver on loopback verifying each HMAC with its own code; default settings (16 deliveries in flight per endpoint and replica).",
			"Latency includes the XADD, the XREADGROUP wake-up, the signed POST and its XACK; a burst's tail is the wait behind the backlog. events/s is the run's events over its time, publishing included (one publisher, one XADD round trip each).",
		},
	}, nil
}
