package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/webhook"
	"github.com/sandgate/sandgate/internal/webhook/webhooktest"
)

// WebhookEventsEnv sets how many lifecycle events TestWebhooksLoseNothing
// makes (default 1000; fewer on a loaded machine, noted in docs/TESTING.md).
const WebhookEventsEnv = "SANDGATE_E2E_WEBHOOK_EVENTS"

// Three replicas deliver the fleet's lifecycle events to a receiver on
// loopback (allow-listed) while one replica after another is SIGKILLed
// every 3 s (five at least) and the receiver answers 500 from the start
// until 10 s after its first refusal: every event in
// the stream reaches it, correctly signed (verified by the receiver's own
// HMAC code), with its stream id as webhook-id; duplicates are counted.
func TestWebhooksLoseNothing(t *testing.T) {
	t.Parallel()
	want := 1000
	if s := os.Getenv(WebhookEventsEnv); s != "" {
		want, _ = strconv.Atoi(s)
	}
	secret := webhook.NewSecret()
	rcv := webhooktest.New(secret)
	defer rcv.Close()
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := fmt.Sprintf("webhook_endpoints:\n  - id: e2e\n    url: %s\n    secret: $E2E_WEBHOOK_SECRET\n", rcv.URL())
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, "--config", cfg, "--redis-prefix", "wh:", "--process-isolation", "none", "--max-sandboxes", "0",
		"--webhook-allow-addresses", "127.0.0.1/32", "--webhook-claim-idle", "3s", "--webhook-timeout", "1s",
		"--webhook-backoff", "100ms", "--webhook-max-backoff", "1s", "--webhook-max-age", "10m")
	f.env = []string{"E2E_WEBHOOK_SECRET=" + secret}
	var mu sync.Mutex
	live := []*gateway{f.start(), f.start(), f.start()}
	pick := func() *gateway {
		mu.Lock()
		defer mu.Unlock()
		return live[rand.N(len(live))]
	}
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	stream := "wh:{fleet}:events"
	count := func() int64 { n, _ := rdb.XLen(ctx, stream).Result(); return n }

	// Load: threads cycle through create/reclaim (ready) and release
	// (released), cheap lifecycle events with no new process each time.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			thread := fmt.Sprintf("hook-%d", w)
			for count() < int64(want) {
				select {
				case <-stop:
					return
				default:
				}
				for _, m := range []string{http.MethodPut, http.MethodDelete} {
					g := pick()
					req, _ := http.NewRequest(m, g.URL+"/threads/"+thread+"/sandbox", nil)
					resp, err := g.client.Do(req)
					if err != nil {
						time.Sleep(100 * time.Millisecond) // a replica just killed
						continue
					}
					resp.Body.Close()
					answered.Add(1)
					if resp.StatusCode >= 300 {
						time.Sleep(100 * time.Millisecond) // a lock a killed replica held, say
					}
				}
			}
		}()
	}
	// Faults, until the events are made, the receiver has refused for 10 s
	// and five replicas were killed: a replica SIGKILLed and replaced
	// every 3 s; the receiver answering 500 from the start until 10 s
	// after its first refusal (on a loaded machine the first delivery can
	// come late; on a quick one every event can be made within seconds).
	began := time.Now()
	rcv.Fail(true)
	kills, refusedSince, failing := 0, time.Time{}, true
	for count() < int64(want) || failing || kills < 5 {
		if time.Since(began) > 4*time.Minute {
			t.Fatalf("only %d events in 4 minutes (%d answers, %d delivered, %d refused)", count(), answered.Load(),
				rcv.Counts().Events, rcv.Counts().Refused)
		}
		time.Sleep(3 * time.Second)
		if failing && refusedSince.IsZero() && rcv.Counts().Refused > 0 {
			refusedSince = time.Now()
		}
		if failing && !refusedSince.IsZero() && time.Since(refusedSince) > 10*time.Second {
			rcv.Fail(false)
			failing = false
		}
		mu.Lock()
		i := rand.N(len(live))
		victim := live[i]
		mu.Unlock()
		victim.kill()
		kills++
		g := f.start()
		mu.Lock()
		live[i] = g
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	rcv.Fail(false)
	took := time.Since(began)

	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	var missing []string
	for {
		missing = missing[:0]
		for _, m := range msgs {
			if _, ok := rcv.Has(m.ID); !ok {
				missing = append(missing, m.ID)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	c := rcv.Counts()
	t.Logf("%d events in %s with %d replicas SIGKILLed; receiver: %d events, %d duplicates, %d answered 500",
		len(msgs), took.Round(time.Second), kills, c.Events, c.Duplicates, c.Refused)
	if len(missing) > 0 {
		t.Fatalf("%d of %d events never delivered, e.g. %v", len(missing), len(msgs), missing[:min(5, len(missing))])
	}
	if c.BadSignature != 0 || c.BadID != 0 {
		t.Fatalf("%d deliveries with a bad signature, %d whose webhook-id was not the event's id", c.BadSignature, c.BadID)
	}
	if c.Refused == 0 {
		t.Fatal("no delivery was answered 500: the retries went untested")
	}
	if c.Events != len(msgs) {
		t.Fatalf("receiver has %d events, the stream %d", c.Events, len(msgs))
	}
	// Stats are per event: delivered counts each once whatever the kills.
	resp, err := live[0].client.Get(live[0].URL + "/admin/v1/webhooks")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin list: %v %v", resp, err)
	}
	resp.Body.Close()
}
