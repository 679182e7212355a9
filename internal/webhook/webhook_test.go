package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/testutil"
	"github.com/sandgate/sandgate/internal/webhook/webhooktest"
)

var testKeys = Keys{Stream: "t{fleet}:events", Endpoints: "t{fleet}:webhooks", Stats: "t{fleet}:whstats", DeadPrefix: "t{fleet}:whdead:"}

func client(t *testing.T) redis.UniversalClient {
	t.Helper()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// loopback lets deliveries reach the test's receivers, and nothing else
// private.
func loopback(t *testing.T) *egress.Dialer {
	t.Helper()
	d, err := egress.NewDialer(egress.Config{AllowAddresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fast are timings that make retries and claims take a second, not minutes.
func fast(cfg Config) Config {
	cfg.Keys = testKeys
	cfg.Timeout, cfg.Backoff, cfg.MaxBackoff, cfg.ClaimIdle = 500*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond, time.Second
	cfg.Refresh = 100 * time.Millisecond
	cfg.Log = slog.New(slog.DiscardHandler)
	return cfg
}

// run starts a replica's delivery loop until the test ends or stop.
func run(t *testing.T, s *Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Loop().Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// started runs a Service of cfg until the test ends, once its configured
// endpoints' groups exist.
func started(t *testing.T, rdb redis.UniversalClient, cfg Config) *Service {
	t.Helper()
	s, err := New(rdb, cfg, loopback(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	run(t, s)
	waitFor(t, "groups created", 5*time.Second, func() bool {
		g, _ := rdb.XInfoGroups(context.Background(), testKeys.Stream).Result()
		return len(g) == len(cfg.Endpoints)
	})
	return s
}

func publish(t *testing.T, rdb redis.UniversalClient, n int, typ events.Type) []string {
	t.Helper()
	bus, err := events.New(rdb, events.Config{Stream: testKeys.Stream, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		bus.Publish(context.Background(), events.Event{Type: typ, SandboxID: fmt.Sprintf("s%d", i)})
	}
	msgs, err := rdb.XRange(context.Background(), testKeys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The signature is Standard Webhooks': checked against the specification's
// own example and against an HMAC computed here by hand.
func TestSignature(t *testing.T) {
	t.Parallel()
	// The example of the Standard Webhooks specification and its libraries.
	key, err := secretKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want the specification's %s", got, want)
	}
	secret := NewSecret()
	raw, _ := base64.StdEncoding.DecodeString(secret[len(SecretPrefix):])
	mac := hmac.New(sha256.New, raw)
	mac.Write([]byte("1733500000000-7.1733500001.{\"type\":\"ready\"}"))
	key, _ = secretKey(secret)
	if got, want := Sign(key, "1733500000000-7", time.Unix(1733500001, 0), []byte(`{"type":"ready"}`)),
		"v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	for _, bad := range []string{"", "whsec_", "secret", "whsec_c2hvcnQ=", "whsec_!!!!"} {
		if _, err := secretKey(bad); !errors.Is(err, ErrBadSecret) {
			t.Errorf("secret %q accepted", bad)
		}
	}
}

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n        int
		min, max time.Duration
	}{{1, 50 * time.Millisecond, 100 * time.Millisecond}, {2, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 200 * time.Millisecond, 400 * time.Millisecond}, {10, 500 * time.Millisecond, time.Second}} {
		for range 50 {
			if d := backoff(100*time.Millisecond, time.Second, tc.n); d < tc.min || d > tc.max {
				t.Fatalf("retry %d: %s, want %s-%s", tc.n, d, tc.min, tc.max)
			}
		}
	}
}

// Every event reaches the endpoint once, signed, with its stream id as
// webhook-id; the event filter holds; the stats count them.
func TestDeliversEveryEventSignedAndFiltered(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	secret := NewSecret()
	all, onlyReady := webhooktest.New(secret), webhooktest.New(secret)
	defer all.Close()
	defer onlyReady.Close()
	s := started(t, rdb, fast(Config{Endpoints: []Endpoint{{ID: "all", URL: all.URL(), Secret: secret},
		{ID: "ready", URL: onlyReady.URL(), Secret: secret, Events: []events.Type{events.Ready}}}}))
	ready := publish(t, rdb, 20, events.Ready)
	ids := publish(t, rdb, 10, events.Destroyed)
	waitFor(t, "30 events delivered", 10*time.Second, func() bool { return all.Counts().Events == 30 })
	waitFor(t, "20 ready events delivered", 10*time.Second, func() bool { return onlyReady.Counts().Events == 20 })
	for _, id := range ids {
		if _, ok := all.Has(id); !ok {
			t.Fatalf("event %s not delivered", id)
		}
	}
	for _, id := range ready {
		if typ, ok := onlyReady.Has(id); !ok || typ != "ready" {
			t.Fatalf("ready event %s: %q %v", id, typ, ok)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if c := all.Counts(); c.Duplicates != 0 || c.BadSignature != 0 || c.BadID != 0 {
		t.Fatalf("receiver saw %+v", c)
	}
	if c := onlyReady.Counts(); c.Events != 20 {
		t.Fatalf("filtered endpoint got %+v, want the 20 ready events only", c)
	}
	views, err := s.List(context.Background())
	if err != nil || len(views) != 2 || views[0].Stats.Delivered != 30 || views[1].Stats.Delivered != 20 || views[0].Secret != "" {
		t.Fatalf("list: %+v, %v", views, err)
	}
}

// A receiver answering 500 gets the event again, later each time, and it
// counts as delivered once it answers 204; one that never does gets it
// dead-lettered after MaxAge, kept and listed.
func TestRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	secret := NewSecret()
	flaky, down := webhooktest.New(secret), webhooktest.New(secret)
	defer flaky.Close()
	defer down.Close()
	flaky.Fail(true)
	down.Fail(true)
	cfg := fast(Config{Endpoints: []Endpoint{{ID: "flaky", URL: flaky.URL(), Secret: secret}, {ID: "down", URL: down.URL(), Secret: secret}}})
	cfg.MaxAge = 3 * time.Second
	s := started(t, rdb, cfg)
	ids := publish(t, rdb, 1, events.Destroyed)
	waitFor(t, "3 refused attempts", 5*time.Second, func() bool { return flaky.Counts().Refused >= 3 })
	flaky.Fail(false)
	waitFor(t, "delivered after the retries", 5*time.Second, func() bool { return flaky.Counts().Events == 1 })
	waitFor(t, "dead-lettered", 10*time.Second, func() bool {
		v, _ := s.List(context.Background())
		return len(v) == 2 && v[1].Stats.DeadLettered == 1
	})
	views, _ := s.List(context.Background())
	if st := views[0].Stats; st.Delivered != 1 || st.Failed < 3 || st.DeadLettered != 0 {
		t.Fatalf("flaky endpoint stats %+v", st)
	}
	if st := views[1].Stats; st.Delivered != 0 || int(st.Failed) != down.Counts().Refused {
		t.Fatalf("down endpoint stats %+v, receiver %+v", st, down.Counts())
	}
	dead, err := s.DeadLetters(context.Background(), "down", 10)
	if err != nil || len(dead) != 1 || dead[0].EventID != ids[0] || dead[0].Reason != "endpoint answered 500" || dead[0].Attempts < 2 {
		t.Fatalf("dead letters %+v, %v", dead, err)
	}
	// Acknowledged: nothing is left pending for a claim to deliver again.
	for _, g := range []string{"webhook:flaky", "webhook:down"} {
		if p, _ := rdb.XPending(context.Background(), testKeys.Stream, g).Result(); p.Count != 0 {
			t.Fatalf("%s: %d pending", g, p.Count)
		}
	}
}

// Events a replica took (XREADGROUP) and never finished, because it died,
// are delivered by a live replica once idle for ClaimIdle; and a live
// replica's events in retry are not taken from it (no duplicates though
// the retries outlast ClaimIdle).
func TestClaimsTheEventsOfADeadConsumer(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := context.Background()
	secret := NewSecret()
	rcv := webhooktest.New(secret)
	defer rcv.Close()
	ep := Endpoint{ID: "r", URL: rcv.URL(), Secret: secret}
	if err := rdb.XGroupCreateMkStream(ctx, testKeys.Stream, ep.group(), "$").Err(); err != nil {
		t.Fatal(err)
	}
	ids := publish(t, rdb, 10, events.Ready)
	// The dead replica took all ten.
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: ep.group(), Consumer: "dead", Streams: []string{testKeys.Stream, ">"}}).Result()
	if err != nil || len(got[0].Messages) != 10 {
		t.Fatalf("dead consumer read %v, %v", got, err)
	}
	took := time.Now()
	rcv.Fail(true) // and a live replica's retries outlast ClaimIdle
	var replicas []*Service
	for i := range 2 {
		cfg := fast(Config{Endpoints: []Endpoint{ep}})
		cfg.Consumer = fmt.Sprintf("live%d", i)
		s, err := New(rdb, cfg, loopback(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		replicas = append(replicas, s)
		run(t, s)
	}
	waitFor(t, "claimed and attempted", 10*time.Second, func() bool { return rcv.Counts().Refused >= 10 })
	if since := time.Since(took); since < time.Second {
		t.Fatalf("claimed after %s, before ClaimIdle", since)
	}
	time.Sleep(2500 * time.Millisecond) // > 2 ClaimIdle of retries
	rcv.Fail(false)
	waitFor(t, "all ten delivered", 10*time.Second, func() bool { return rcv.Counts().Events == 10 })
	time.Sleep(1500 * time.Millisecond)
	if c := rcv.Counts(); c.Duplicates != 0 || c.BadSignature != 0 {
		t.Fatalf("receiver saw %+v; want no duplicate: a live replica's retries are its own", c)
	}
	for _, id := range ids {
		if _, ok := rcv.Has(id); !ok {
			t.Fatalf("event %s lost", id)
		}
	}
	views, _ := replicas[0].List(ctx)
	if views[0].Stats.Delivered != 10 {
		t.Fatalf("stats %+v", views[0].Stats)
	}
}

// An endpoint on a refused address (cloud metadata, loopback not
// allow-listed, a name resolving to one) is refused by the egress policy
// before any packet leaves: the dialer's refusal, no dial made.
func TestRefusedAddressIsNeverDialled(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	dialer, err := egress.NewDialer(egress.Config{Dial: func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("must not dial")
	}})
	if err != nil {
		t.Fatal(err)
	}
	secret := NewSecret()
	key, _ := secretKey(secret)
	for _, url := range []string{"http://169.254.169.254/latest/meta-data", "http://127.0.0.1:9/hook", "https://[::1]/hook",
		"http://10.0.0.1/hook", "http://localhost:9/hook"} {
		s, err := New(nil, fast(Config{}), dialer)
		if err != nil {
			t.Fatal(err)
		}
		d := &delivery{l: s.Loop(), e: Endpoint{ID: "x", URL: url, Secret: secret}, key: key}
		err = d.post(context.Background(), "1-0", []byte(`{}`))
		if _, ok := errors.AsType[*egress.RefusedError](err); !ok {
			t.Fatalf("%s: %v, want a refusal", url, err)
		}
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d dials made", n)
	}
}

// The admin API's side: validation, secrets made and shown once, configured
// endpoints not deletable, a deleted endpoint's group gone.
func TestCreateListDelete(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := context.Background()
	s, err := New(rdb, fast(Config{Endpoints: []Endpoint{{ID: "conf", URL: "https://hooks.example/a", Secret: NewSecret()}}}), loopback(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Endpoint{{URL: "ftp://x/"}, {URL: "https://u:p@x/"}, {URL: "/relative"},
		{URL: "https://x/", Events: []events.Type{"Bad Type"}}, {URL: "https://x/", Secret: "plain"}} {
		if _, err := s.Create(ctx, bad); !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("%+v: %v, want ErrBadEndpoint", bad, err)
		}
	}
	e, err := s.Create(ctx, Endpoint{URL: "https://hooks.example/b", Events: []events.Type{events.Destroyed}})
	if err != nil || e.Secret == "" || e.Source != SourceAPI {
		t.Fatalf("create: %+v, %v", e, err)
	}
	views, err := s.List(ctx)
	if err != nil || len(views) != 2 || views[0].ID != "conf" || views[1].ID != e.ID || views[1].Secret != "" || views[0].Source != SourceConfig {
		t.Fatalf("list: %+v, %v", views, err)
	}
	if err := s.Delete(ctx, "conf"); !errors.Is(err, ErrConfigured) {
		t.Fatalf("delete configured: %v", err)
	}
	if err := s.Delete(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	if err := s.Delete(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if g, _ := rdb.XInfoGroups(ctx, testKeys.Stream).Result(); len(g) != 0 {
		t.Fatalf("groups left: %+v", g)
	}
	if _, err := s.DeadLetters(ctx, e.ID, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dead letters of a deleted endpoint: %v", err)
	}
}
