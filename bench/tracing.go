package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The tracing suite: what tracing and the access log cost a cached request,
// the gateway's hot path. Four gateways share one Redis and one sandbox and
// differ only in telemetry; wrk measures them interleaved in the same run.

func init() { register("tracing", tracingSuite) }

// tracingConfig is one gateway under test.
type tracingConfig struct {
	name     string
	instance string   // --instance, and service.instance.id on its spans
	env      []string // OTEL_* (added to the bench's environment)
	args     []string
}

var tracingConns = []int{1, 16, 64}

func tracingConfigs(sinkURL string) []tracingConfig {
	otel := func(ratio string) []string {
		return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sinkURL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=" + ratio}
	}
	return []tracingConfig{
		{name: "tracing off", instance: "bench-off"},
		{name: "tracing off, access log (info)", instance: "bench-access", args: []string{"--log-level", "info"}},
		{name: "tracing on, sampled 1.0", instance: "bench-1.0", env: otel("1.0")},
		{name: "tracing on, sampled 0.01", instance: "bench-0.01", env: otel("0.01")},
	}
}

func tracingSuite(ctx context.Context) (Result, error) {
	began, loadStart := time.Now(), loadAvg()
	tmp, err := os.MkdirTemp("", "sandgate-bench-tracing-")
	if err != nil {
		return Result{}, err
	}
	var cleanup cleanupStack
	defer func() { cleanup.run(); _ = os.RemoveAll(tmp) }()

	sink, err := startOTLPSink()
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(context.Context) { sink.close() })
	configs := tracingConfigs(sink.url)
	targets, err := tracingSetup(ctx, tmp, configs, &cleanup)
	if err != nil {
		return Result{}, err
	}
	w := proxyWorkloads()[0] // small GET /v1/sandbox
	for _, t := range targets {
		if err := sanityCheck(ctx, t, w); err != nil {
			return Result{}, fmt.Errorf("%s via %s: %w", w.name, t.name, err)
		}
	}
	script, err := writeScript(tmp, "small-get", wrkScript(w.method, w.body, w.headers))
	if err != nil {
		return Result{}, err
	}

	var rows [][]string
	for _, conns := range tracingConns {
		before := sink.counts()
		cell, err := measureTargets(ctx, targets, w, script, conns)
		if err != nil {
			return Result{}, err
		}
		after := sink.counts()
		off := cell[0].RPS()
		for i, c := range configs {
			r := cell[i]
			fmt.Fprintf(os.Stderr, "bench: tracing c=%d %s: %.0f req/s\n", conns, c.name, r.RPS())
			rows = append(rows, []string{fmt.Sprint(conns), c.name, fmt.Sprintf("%.0f", r.RPS()), ratio(r.RPS(), off),
				fmt.Sprintf("%s / %s / %s", ms(usDur(r.P50US)), ms(usDur(r.P99US)), ms(usDur(r.P999US))),
				ms(usDur(r.P99US - cell[0].P99US)), fmt.Sprint(r.Requests),
				fmt.Sprint(after[c.instance] - before[c.instance]), fmt.Sprint(r.Errors())})
		}
	}
	notes := []string{
		fmt.Sprintf("Small GET /v1/sandbox through four gateways over one Redis and one sandbox (a cached thread), differing only in "+
			"telemetry: `--log-level warn` (no access log, tracing off: no OTEL_* set), the same at `--log-level info` (one "+
			"access log line per request, JSON to a file), and tracing on with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an "+
			"OTLP/HTTP sink in the bench process, OTEL_TRACES_SAMPLER=parentbased_traceidratio at 1.0 and at 0.01 (SDK "+
			"defaults otherwise: batch span processor, 2048-span queue, 512-span batches, 5 s delay). wrk -t1, %s warm-up per "+
			"target, then %s per target in %d rounds of 1 s whose target order rotates, req/s pooled and each percentile the "+
			"median of the rounds' (as the proxy-throughput suite); compare within a connection count, not across runs.",
			secs(opts.ProxyWarmup), secs(opts.ProxyMeasure), opts.ProxyRounds),
		"A sampled cached request makes three gateway spans (the otelecho server span, the acquire hit, the proxy attempt); " +
			"'spans received' is what the sink decoded from that gateway during the measured runs and warm-ups. Where it is below " +
			"3 × requests, the SDK's queue was full and it dropped spans rather than slow requests down. The sandbox was " +
			"provisioned by the tracing-off gateway, so it does not trace: the numbers are the gateway's cost only.",
		"Tracing off costs the request path one context lookup per span site (no span, no attribute slice, no allocation): " +
			"the go-bench section runs the cached paths with -benchmem; an allocation there fails TestCachedAcquireDoesNotAllocate, " +
			"TestCachedRouteByIDDoesNotAllocate, TestRouteMatchDoesNotAllocate, TestUpstreamPathDoesNotAllocate, TestAccountingWithoutAccessLogDoesNotAllocate and TestRequestMetricsDoNotAllocate.",
	}
	notes = append(notes, fmt.Sprintf("Load average at start %s; the suite took %s.", loadStart, time.Since(began).Round(time.Second)))
	return Result{
		Title: "Tracing and access log: cost on the cached proxy path",
		Columns: []string{"conns", "gateway", "req/s", "÷ tracing off", "p50 / p99 / p99.9 ms", "p99 − tracing off ms",
			"requests", "spans received", "errors"},
		Rows:  rows,
		Notes: notes,
	}, nil
}

// tracingSetup starts Redis and the gateways; the first gateway provisions
// the thread's sandbox, which the others then find in Redis.
func tracingSetup(ctx context.Context, tmp string, configs []tracingConfig, cleanup *cleanupStack) ([]target, error) {
	bin, err := buildGateway(ctx)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(tmp, "data")
	for _, d := range []string{"redis", "data"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return nil, err
		}
	}
	redis, redisAddr, err := startRedis(ctx, filepath.Join(tmp, "redis"))
	if err != nil {
		return nil, err
	}
	cleanup.push(func(context.Context) { redis.stop(syscall.SIGTERM, 5*time.Second) })
	var targets []target
	for i, c := range configs {
		args := append([]string{"--instance", c.instance}, c.args...)
		gw, addr, err := startGatewayEnv(ctx, bin, redisAddr, dataDir, filepath.Join(tmp, c.instance+".log"), c.env, args...)
		if err != nil {
			return nil, err
		}
		// Cleanup runs in reverse: the other gateways stop, then the first
		// destroys the sandbox (its child process) and stops.
		cleanup.push(func(context.Context) { gw.stop(syscall.SIGTERM, 10*time.Second) })
		base := "http://" + addr + "/threads/" + proxyThread
		if i == 0 {
			if _, err := call(ctx, http.MethodPut, base+"/sandbox", "", nil); err != nil {
				return nil, fmt.Errorf("provision thread: %w", err)
			}
			cleanup.push(func(ctx context.Context) {
				if _, err := call(ctx, http.MethodDelete, base+"/sandbox?destroy=true", "", nil); err != nil {
					fmt.Fprintf(os.Stderr, "bench: destroy sandbox: %v\n", err)
				}
			})
		}
		targets = append(targets, target{name: c.name, base: base})
	}
	return targets, nil
}
