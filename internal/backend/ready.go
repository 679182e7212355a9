package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Readiness polling starts fast because a local sandbox is usually up within
// a few milliseconds, and backs off so a slow image pull does not hammer the
// engine. DeerFlow polls at a fixed 1 s, which puts a second on every cold start.
const (
	readyFirstInterval = 2 * time.Millisecond
	readyMaxInterval   = 250 * time.Millisecond
	readyProbeTimeout  = 2 * time.Second
)

var readyClient = &http.Client{
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Second,
	},
	Timeout:       readyProbeTimeout,
	CheckRedirect: noRedirect,
}

// noRedirect makes a probe's 3xx its answer (not ready): followed, it
// would carry the probe's secret or Authorization wherever the sandbox
// (whose server its tenant may control) or a provisioner points.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// WaitReady polls GET {baseURL}/v1/sandbox until it answers 200 or ctx ends.
// Inside a sampled trace the wait is a span, and each probe carries its
// trace context, so the sandbox server's first span joins the trace.
func WaitReady(ctx context.Context, baseURL string) error {
	return waitReady(ctx, baseURL, "", "")
}

// WaitReadyAs is WaitReady with an Authorization header on every probe
// ("" = none): for a sandbox URL behind another authenticated gateway.
func WaitReadyAs(ctx context.Context, baseURL, authorization string) error {
	return waitReady(ctx, baseURL, "Authorization", authorization)
}

// WaitReadySecret is WaitReady for a sandbox server that requires secret
// in sandboxspec.SecretHeader ("" = none).
func WaitReadySecret(ctx context.Context, baseURL, secret string) error {
	return waitReady(ctx, baseURL, sandboxspec.SecretHeader, secret)
}

func waitReady(ctx context.Context, baseURL, header, value string) (err error) {
	ctx, span := telemetry.Child(ctx, "sandgate.sandbox.wait_ready")
	probes := 0
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("probes", probes))
		}
		telemetry.Fail(span, err)
		span.End()
	}()
	interval := readyFirstInterval
	client, base := readyClient, baseURL
	if b, socket := HTTPBase(baseURL); socket != "" {
		client, base = unixClient(socket, readyProbeTimeout), b
		defer client.CloseIdleConnections()
	}
	var lastErr error
	for {
		probes++
		ok, err := probe(ctx, client, base+"/v1/sandbox", header, value)
		if ok {
			return nil
		}
		lastErr = err
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sandbox not ready: %w (last: %v)", ctx.Err(), lastErr)
		case <-t.C:
		}
		interval = min(interval*2, readyMaxInterval)
	}
}

// unixClient is a client of one sandbox on a Unix socket, for calls of
// the gateway's own (readiness, serveradmin.go) bounded by timeout; it
// follows no redirect.
func unixClient(socket string, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport:     &http.Transport{Proxy: nil, DialContext: DialUnix(socket, time.Second), MaxIdleConnsPerHost: 1},
		Timeout:       timeout,
		CheckRedirect: noRedirect,
	}
}

func probe(ctx context.Context, client *http.Client, url, header, value string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, fmt.Errorf("build probe: %w", err)
	}
	if value != "" {
		req.Header.Set(header, value)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := client.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			// Not the URL: behind another gateway it holds a capability.
			return false, fmt.Errorf("probe: %w", ue.Err)
		}
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("probe status %d", resp.StatusCode)
	}
	return true, nil
}
