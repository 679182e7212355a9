package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// value is the sample of metric name whose labels include want (counter,
// gauge, or a histogram's count), or -1 when there is none.
func value(t *testing.T, m *Metrics, name string, want map[string]string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if matches(s.GetLabel(), want) {
				switch {
				case s.Counter != nil:
					return s.GetCounter().GetValue()
				case s.Gauge != nil:
					return s.GetGauge().GetValue()
				case s.Histogram != nil:
					return float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return -1
}

func matches(labels []*dto.LabelPair, want map[string]string) bool {
	n := 0
	for _, l := range labels {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func TestMetricsRecord(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	m.Acquired("cold", 40*time.Millisecond)
	m.Acquired("hit", time.Microsecond)
	m.Acquired("hit", time.Microsecond)
	m.Acquired("whatever went wrong", time.Second)
	m.Proxied(RouteThread, 200, time.Millisecond)
	m.Proxied(RouteThread, 499, time.Millisecond)
	m.Proxied(RouteSandbox, 503, time.Millisecond)
	m.Proxied(RouteSandbox, 0, time.Millisecond)
	m.Created(true)
	m.Created(false)
	m.Destroyed("idle")
	m.Evicted()
	m.Adopted("reconciler")
	m.ReaperClaimed("idle_warm")
	m.Reconciled(1, 0, 2, 0)
	m.DialRetried()
	m.RedisError()
	m.EgressDecision(true, "ok")
	m.EgressDecision(false, "private_address")
	m.EgressDecision(false, "private_address")
	m.EgressDecision(false, "a reason added in egress only")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandgate_acquire_duration_seconds", map[string]string{"outcome": "cold"}, 1},
		{"sandgate_acquire_duration_seconds", map[string]string{"outcome": "hit"}, 2},
		{"sandgate_acquire_duration_seconds", map[string]string{"outcome": "error"}, 1},
		{"sandgate_acquire_duration_seconds", map[string]string{"outcome": "warm"}, 0},
		{"sandgate_proxy_requests_total", map[string]string{"route": "thread", "class": "2xx"}, 1},
		{"sandgate_proxy_requests_total", map[string]string{"route": "thread", "class": "4xx"}, 1},
		{"sandgate_proxy_requests_total", map[string]string{"route": "sandbox", "class": "5xx"}, 1},
		{"sandgate_proxy_requests_total", map[string]string{"route": "sandbox", "class": "other"}, 1},
		{"sandgate_proxy_request_duration_seconds", map[string]string{"route": "sandbox"}, 2},
		{"sandgate_sandbox_creates_total", map[string]string{"result": "ok"}, 1},
		{"sandgate_sandbox_creates_total", map[string]string{"result": "error"}, 1},
		{"sandgate_sandbox_destroys_total", map[string]string{"reason": "idle"}, 1},
		{"sandgate_sandbox_destroys_total", map[string]string{"reason": "evicted"}, 0},
		{"sandgate_sandbox_evictions_total", nil, 1},
		{"sandgate_sandbox_adoptions_total", map[string]string{"source": "reconciler"}, 1},
		{"sandgate_reaper_claims_total", map[string]string{"reason": "idle_warm"}, 1},
		{"sandgate_reconciler_actions_total", map[string]string{"action": "finished"}, 2},
		{"sandgate_upstream_dial_retries_total", nil, 1},
		{"sandgate_redis_errors_total", nil, 1},
		{"sandgate_egress_requests_total", map[string]string{"decision": "allow", "reason": "ok"}, 1},
		{"sandgate_egress_requests_total", map[string]string{"decision": "deny", "reason": "private_address"}, 2},
		{"sandgate_egress_requests_total", map[string]string{"decision": "deny", "reason": "other"}, 1},
		{"sandgate_egress_requests_total", map[string]string{"decision": "deny", "reason": "dial_failed"}, 0},
	} {
		if got := value(t, m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A gateway without metrics holds a nil *Metrics: every recording method
// must be a no-op on it, not a panic on the request path. Each call is
// checked by name, and the same call on a real Metrics must record, so a
// call that does nothing anyway cannot hide in the list.
func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		call   func(*Metrics)
		metric string
		labels map[string]string
	}{
		{"Acquired", func(m *Metrics) { m.Acquired("hit", 0) }, "sandgate_acquire_duration_seconds", map[string]string{"outcome": "hit"}},
		{"Proxied", func(m *Metrics) { m.Proxied(RouteThread, 200, 0) }, "sandgate_proxy_requests_total", map[string]string{"route": "thread", "class": "2xx"}},
		{"Created", func(m *Metrics) { m.Created(true) }, "sandgate_sandbox_creates_total", map[string]string{"result": "ok"}},
		{"Destroyed", func(m *Metrics) { m.Destroyed("idle") }, "sandgate_sandbox_destroys_total", map[string]string{"reason": "idle"}},
		{"Evicted", func(m *Metrics) { m.Evicted() }, "sandgate_sandbox_evictions_total", nil},
		{"Adopted", func(m *Metrics) { m.Adopted("acquire") }, "sandgate_sandbox_adoptions_total", map[string]string{"source": "acquire"}},
		{"ReaperClaimed", func(m *Metrics) { m.ReaperClaimed("idle_active") }, "sandgate_reaper_claims_total", map[string]string{"reason": "idle_active"}},
		{"Reconciled", func(m *Metrics) { m.Reconciled(1, 1, 1, 1) }, "sandgate_reconciler_actions_total", map[string]string{"action": "adopted"}},
		{"DialRetried", func(m *Metrics) { m.DialRetried() }, "sandgate_upstream_dial_retries_total", nil},
		{"RedisError", func(m *Metrics) { m.RedisError() }, "sandgate_redis_errors_total", nil},
		{"EgressDecision", func(m *Metrics) { m.EgressDecision(false, "not_allowed") }, "sandgate_egress_requests_total", map[string]string{"decision": "deny", "reason": "not_allowed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s on a nil *Metrics panicked: %v", c.name, r)
					}
				}()
				c.call(nil)
			}()
			real := NewMetrics()
			c.call(real)
			if got := value(t, real, c.metric, c.labels); got <= 0 {
				t.Errorf("%s on a real Metrics recorded nothing in %s (%v)", c.name, c.metric, got)
			}
		})
	}
}

func TestRequestMetricsDoNotAllocate(t *testing.T) {
	m := NewMetrics()
	allocs := testing.AllocsPerRun(1000, func() {
		m.Acquired("hit", time.Microsecond)
		m.Proxied(RouteThread, 200, time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("recording a request allocates %.1f times", allocs)
	}
}

func TestPoolGaugesAreReadAtScrape(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	var fail atomic.Bool
	var scrapes atomic.Int32
	m.WatchPool(func(context.Context) (PoolCounts, error) {
		scrapes.Add(1)
		if fail.Load() {
			return PoolCounts{}, errors.New("redis down")
		}
		return PoolCounts{Active: 3, Warm: 2, Creating: 1}, nil
	})
	m.Proxied(RouteThread, 200, time.Millisecond) // no Redis read per request
	if n := scrapes.Load(); n != 0 {
		t.Fatalf("pool counted %d times before any scrape", n)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	scrape := func() string {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("scrape: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	body := scrape()
	for _, want := range []string{`sandgate_sandboxes{state="active"} 3`, `sandgate_sandboxes{state="warm"} 2`,
		`sandgate_sandboxes{state="creating"} 1`, `sandgate_proxy_requests_total{class="2xx",route="thread"} 1`, "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	// Redis down: the pool gauges are left out, the rest is still served.
	fail.Store(true)
	body = scrape()
	if strings.Contains(body, "sandgate_sandboxes{") || !strings.Contains(body, "sandgate_proxy_requests_total") {
		t.Errorf("scrape with Redis down:\n%s", body)
	}
}

// BenchmarkRecordRequest is what a cached request records: an acquire hit
// and a proxied request.
func BenchmarkRecordRequest(b *testing.B) {
	m := NewMetrics()
	b.ReportAllocs()
	for range b.N {
		m.Acquired("hit", time.Microsecond)
		m.Proxied(RouteThread, 200, time.Millisecond)
	}
}
