package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// otlpSpan is one span as an OTLP/HTTP receiver decoded it.
type otlpSpan struct {
	service, instance string
	traceID, id       string // hex
	parent, name      string
	kind              tracepb.Span_SpanKind
	attrs             map[string]string
}

// otlpReceiver is an OTLP/HTTP trace receiver in the test process: it
// decodes the real protobuf payload the gateway and the sandbox servers send.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces with protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, otlpSpan{
					service: res["service.name"], instance: res["service.instance.id"],
					traceID: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()), name: s.GetName(), kind: s.GetKind(),
					attrs: attrMap(s.GetAttributes()),
				})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		case v.GetIntValue() != 0:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		default:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		}
	}
	return m
}

// trace waits until the spans of traceID satisfy done, and returns them.
func (r *otlpReceiver) trace(t *testing.T, traceID string, done func([]otlpSpan) bool) []otlpSpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []otlpSpan
		r.mu.Lock()
		for _, s := range r.spans {
			if s.traceID == traceID {
				got = append(got, s)
			}
		}
		r.mu.Unlock()
		if done(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s incomplete after 20s:\n%s", traceID, describe(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describe(spans []otlpSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s/%s %q id=%s parent=%s %v\n", s.service, s.instance, s.name, s.id, s.parent, s.attrs)
	}
	return b.String()
}

// named returns the spans called name (of service, when set).
func named(spans []otlpSpan, service, name string) []otlpSpan {
	var out []otlpSpan
	for _, s := range spans {
		if s.name == name && (service == "" || s.service == service) {
			out = append(out, s)
		}
	}
	return out
}

// one returns the single span called name and fails otherwise.
func one(t *testing.T, spans []otlpSpan, service, name string) otlpSpan {
	t.Helper()
	got := named(spans, service, name)
	if len(got) != 1 {
		t.Fatalf("%d spans %q of %q, want 1:\n%s", len(got), name, service, describe(spans))
	}
	return got[0]
}

func childOf(t *testing.T, child, parent otlpSpan) {
	t.Helper()
	if child.parent != parent.id || child.traceID != parent.traceID {
		t.Errorf("%s/%q (parent %s) is not a child of %s/%q (%s)", child.service, child.name, child.parent,
			parent.service, parent.name, parent.id)
	}
}

// tracingEnv points a gateway, and through it its sandboxes, at r.
func tracingEnv(r *otlpReceiver, extra ...string) []string {
	return append([]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
		"OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_SERVICE_NAME=sandgate-e2e",
	}, extra...)
}

// execTraced runs command in thread through g as part of a client trace.
func execTraced(t *testing.T, g *gateway, thread, traceID, parent, command string) {
	t.Helper()
	code, body, _ := call(t, "POST", g.URL+"/threads/"+thread+"/v1/shell/exec", map[string]any{"command": command},
		"Traceparent", "00-"+traceID+"-"+parent+"-01")
	if code != 200 {
		t.Fatalf("exec: %d %s", code, body)
	}
}

const (
	gwService      = "sandgate-e2e"
	sandboxService = "sandgate-sandbox"
	routeSpan      = "POST /threads/:thread/v1/*"
	sandboxExec    = "POST /v1/shell/exec"
)

func TestTraceOfColdWarmAndCachedCallsCrossesIntoTheSandbox(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	// The plain child: an isolated sandbox server has no network to
	// export its own spans on.
	f := newFleet(t, "--process-isolation", "none")
	f.env = tracingEnv(rcv)
	g := f.start("--instance", "gw-trace")
	sid := identity.SandboxID("default", "traced")

	// Cold: the whole first call in one trace, continuing the client's.
	const coldTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	execTraced(t, g, "traced", coldTrace, clientSpan, "echo cold")
	spans := rcv.trace(t, coldTrace, func(s []otlpSpan) bool {
		return len(named(s, sandboxService, sandboxExec)) == 1 && len(named(s, sandboxService, "GET /v1/sandbox")) >= 1 &&
			len(named(s, gwService, routeSpan)) == 1
	})
	root := one(t, spans, gwService, routeSpan)
	if root.parent != clientSpan || root.kind != tracepb.Span_SPAN_KIND_SERVER || root.instance != "gw-trace" {
		t.Fatalf("server span: parent %s kind %v instance %s", root.parent, root.kind, root.instance)
	}
	for k, v := range map[string]string{"sandbox.id": sid, "thread.id": "traced", "backend": "process", "outcome": "cold"} {
		if root.attrs[k] != v {
			t.Errorf("server span %s = %q, want %q", k, root.attrs[k], v)
		}
	}
	acquire := one(t, spans, gwService, "sandgate.acquire")
	childOf(t, acquire, root)
	if acquire.attrs["outcome"] != "cold" || acquire.attrs["sandbox.id"] != sid {
		t.Errorf("acquire span: %v", acquire.attrs)
	}
	for _, name := range []string{"sandgate.lock.wait", "sandgate.backend.discover", "sandgate.backend.create"} {
		childOf(t, one(t, spans, gwService, name), acquire)
	}
	create := one(t, spans, gwService, "sandgate.backend.create")
	ready := one(t, spans, gwService, "sandgate.sandbox.wait_ready")
	childOf(t, ready, create)
	// The readiness probe that succeeded reached the new sandbox server,
	// whose span continues the gateway's trace.
	probes := named(spans, sandboxService, "GET /v1/sandbox")
	childOf(t, probes[len(probes)-1], ready)
	proxySpan := one(t, spans, gwService, "sandgate.proxy")
	childOf(t, proxySpan, root)
	if proxySpan.kind != tracepb.Span_SPAN_KIND_CLIENT || proxySpan.attrs["sandbox.id"] != sid {
		t.Errorf("proxy span: kind %v %v", proxySpan.kind, proxySpan.attrs)
	}
	childOf(t, one(t, spans, sandboxService, sandboxExec), proxySpan)

	// Warm: released, then reclaimed; no create in this trace.
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/traced/sandbox", nil); code != 204 {
		t.Fatalf("release: %d %s", code, body)
	}
	const warmTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	execTraced(t, g, "traced", warmTrace, clientSpan, "echo warm")
	spans = rcv.trace(t, warmTrace, func(s []otlpSpan) bool {
		return len(named(s, sandboxService, sandboxExec)) == 1 && len(named(s, gwService, routeSpan)) == 1
	})
	root = one(t, spans, gwService, routeSpan)
	acquire = one(t, spans, gwService, "sandgate.acquire")
	childOf(t, acquire, root)
	if acquire.attrs["outcome"] != "warm" || root.attrs["outcome"] != "warm" {
		t.Errorf("warm acquire: %v / %v", acquire.attrs, root.attrs)
	}
	childOf(t, one(t, spans, gwService, "sandgate.backend.alive"), acquire)
	if n := len(named(spans, gwService, "sandgate.backend.create")); n != 0 {
		t.Errorf("warm reclaim created %d sandboxes", n)
	}
	proxySpan = one(t, spans, gwService, "sandgate.proxy")
	childOf(t, one(t, spans, sandboxService, sandboxExec), proxySpan)

	// Cached: a hit, still one trace from the client into the sandbox.
	const hitTrace = "6bf92f3577b34da6a3ce929d0e0e4738"
	execTraced(t, g, "traced", hitTrace, clientSpan, "echo hit")
	// The gateway's spans end, and are exported, after the sandbox's: wait
	// for its server span too (CI once read the trace before it came).
	spans = rcv.trace(t, hitTrace, func(s []otlpSpan) bool {
		return len(named(s, sandboxService, sandboxExec)) == 1 && len(named(s, gwService, routeSpan)) == 1
	})
	root = one(t, spans, gwService, routeSpan)
	acquire = one(t, spans, gwService, "sandgate.acquire")
	childOf(t, acquire, root)
	if acquire.attrs["outcome"] != "hit" {
		t.Errorf("cached acquire: %v", acquire.attrs)
	}
	childOf(t, one(t, spans, sandboxService, sandboxExec), one(t, spans, gwService, "sandgate.proxy"))
}

// scrape reads /metrics into series -> value ("name{l="v",...}" as exposed).
func scrape(t *testing.T, g *gateway) (map[string]float64, string) {
	t.Helper()
	code, body, _ := call(t, "GET", g.URL+"/metrics", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad metric line %q", line)
		}
		out[line[:i]] = v
	}
	return out, string(body)
}

// waitMetrics scrapes until every wanted series has its value.
func waitMetrics(t *testing.T, g *gateway, step string, want map[string]float64) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, body := scrape(t, g)
		var wrong []string
		for k, v := range want {
			if got[k] != v {
				wrong = append(wrong, fmt.Sprintf("%s = %v, want %v", k, got[k], v))
			}
		}
		if len(wrong) == 0 {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", step, strings.Join(wrong, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMetricsFollowCreatesEvictionsReapsAndAdoptions(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--max-sandboxes", "1", "--idle-timeout", "5s", "--reap-interval", "200ms",
		"--reconcile-interval", "0")
	g := f.start()
	threads := []string{"metric-a", "metric-b", "metric-c"}
	var bodies []string
	check := func(step string, want map[string]float64) {
		bodies = append(bodies, waitMetrics(t, g, step, want))
	}

	shell(t, g.URL, "metric-a", "true")
	check("cold create", map[string]float64{
		`sandgate_sandbox_creates_total{result="ok"}`:               1,
		`sandgate_acquire_duration_seconds_count{outcome="cold"}`:   1,
		`sandgate_sandboxes{state="active"}`:                        1,
		`sandgate_sandboxes{state="warm"}`:                          0,
		`sandgate_proxy_requests_total{class="2xx",route="thread"}`: 1,
		`sandgate_redis_errors_total`:                               0,
	})
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/metric-a/sandbox", nil); code != 204 {
		t.Fatalf("release: %d", code)
	}
	check("release", map[string]float64{`sandgate_sandboxes{state="active"}`: 0, `sandgate_sandboxes{state="warm"}`: 1})

	// At the cap (1), a new thread evicts the warm sandbox.
	shell(t, g.URL, "metric-b", "true")
	check("eviction", map[string]float64{
		`sandgate_sandbox_evictions_total`:                  1,
		`sandgate_sandbox_destroys_total{reason="evicted"}`: 1,
		`sandgate_sandbox_creates_total{result="ok"}`:       2,
		`sandgate_sandboxes{state="active"}`:                1,
		`sandgate_sandboxes{state="warm"}`:                  0,
	})

	// Idle past 5 s: the reaper claims and destroys it.
	check("reap", map[string]float64{
		`sandgate_reaper_claims_total{reason="idle_active"}`: 1,
		`sandgate_sandbox_destroys_total{reason="idle"}`:     1,
		`sandgate_sandboxes{state="active"}`:                 0,
	})

	// A running sandbox Redis forgot is adopted by the next acquire.
	shell(t, g.URL, "metric-c", "true")
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	g.stop() // its route cache would hide the flush; the new replica's counters start at 0
	g = f.start()
	shell(t, g.URL, "metric-c", "true")
	shell(t, g.URL, "metric-c", "true")
	check("adoption", map[string]float64{
		`sandgate_sandbox_adoptions_total{source="acquire"}`:         1,
		`sandgate_acquire_duration_seconds_count{outcome="adopted"}`: 1,
		`sandgate_acquire_duration_seconds_count{outcome="hit"}`:     1,
		`sandgate_sandbox_creates_total{result="ok"}`:                0,
	})

	// No series names a sandbox or a thread.
	sids := []string{}
	for _, th := range threads {
		sids = append(sids, identity.SandboxID("default", th))
	}
	for _, body := range bodies {
		for _, s := range append(sids, threads...) {
			if strings.Contains(body, s) {
				t.Fatalf("/metrics names %q", s)
			}
		}
	}
}

// startRedisWithPassword runs a redis-server that requires a password.
func startRedisWithPassword(t *testing.T, password string) string {
	t.Helper()
	port := testutil.FreePort(t)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir(), "--requirepass", password)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", password, port)
	opts, _ := redis.ParseURL(url)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(t.Context()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server with a password did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return url
}

func TestLogsNeverHoldSecretsOrEnvValues(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"redis password":        "redis-pw-6f1c0d2a",
		"sandbox api key":       "sandbox-key-93b7e4f1",
		"configured env secret": "env-secret-5d2a8c3e",
		"configured env value":  "env-plain-value-0a9b8c7d",
		"otlp header":           "otlp-bearer-7e6d5c4b",
		"client credential":     "client-bearer-1a2b3c4d",
	}
	rcv := newOTLPReceiver(t)
	cfgPath := filepath.Join(t.TempDir(), "sandgate.yaml")
	yaml := fmt.Sprintf("environment:\n  MY_API_TOKEN: %s\n  PLAIN_SETTING: %s\n",
		secrets["configured env secret"], secrets["configured env value"])
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, "--redis-url", startRedisWithPassword(t, secrets["redis password"]),
		"--sandbox-api-key", secrets["sandbox api key"], "--config", cfgPath)
	f.env = tracingEnv(rcv, "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20"+secrets["otlp header"])
	g := f.start()

	logs := map[string]string{}
	// The secrets are in play: the sandbox sees its configured env.
	d := shell(t, g.URL, "secretive", `echo "$MY_API_TOKEN $PLAIN_SETTING"; env`)
	if !strings.Contains(d.Output, secrets["configured env secret"]+" "+secrets["configured env value"]) {
		t.Fatalf("configured env did not reach the sandbox: %q", d.Output)
	}
	auth := []string{"Authorization", "Bearer " + secrets["client credential"]}
	for _, req := range []struct{ method, path string }{
		{"POST", "/threads/secretive/v1/shell/exec"},
		{"GET", "/threads/secretive/v1/sandbox"},
		{"GET", "/threads/secretive/v1/no-such-endpoint"},
		{"GET", "/threads/bad%2Fthread/v1/sandbox"},
		{"GET", "/sandboxes/0123456789abcdef/v1/sandbox"},
		{"PUT", "/threads/secretive/sandbox"},
		{"DELETE", "/threads/secretive/sandbox?destroy=true"}, // removes the sandbox's log: read it first
	} {
		if req.method == "DELETE" {
			files, _ := filepath.Glob(filepath.Join(f.dataDir, "sandboxes", "process", "*.log"))
			if len(files) == 0 {
				t.Fatal("no sandbox server log found")
			}
			for _, p := range files {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				logs[filepath.Base(p)] = string(b)
			}
		}
		var body any
		if req.method == "POST" {
			body = map[string]any{"command": "exit 3"}
		}
		call(t, req.method, g.URL+req.path, body, auth...)
	}
	g.stop() // flushes logs and spans
	logs["gateway"] = g.logs.String()
	for where, text := range logs {
		for what, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("the %s log holds the %s", where, what)
			}
		}
	}

	// One access log line per proxied request, with its trace.
	var access []map[string]any
	for _, line := range strings.Split(logs["gateway"], "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "proxied" {
			access = append(access, m)
		}
	}
	if len(access) != 6 {
		t.Fatalf("%d access log lines for 6 data-plane requests:\n%s", len(access), logs["gateway"])
	}
	first := access[0]
	for _, k := range []string{"method", "route", "path", "status", "duration_ms", "bytes_in", "bytes_out",
		"sandbox_id", "thread", "backend", "outcome", "trace_id", "span_id"} {
		if _, ok := first[k]; !ok {
			t.Errorf("access log line lacks %s: %v", k, first)
		}
	}
	if first["status"] != float64(200) || first["outcome"] != "cold" || first["thread"] != "secretive" ||
		first["bytes_in"].(float64) == 0 || first["bytes_out"].(float64) == 0 {
		t.Errorf("first access line: %v", first)
	}
}
