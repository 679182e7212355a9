package e2e

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/remote"
	"github.com/sandgate/sandgate/internal/identity"
)

// TestRemoteBackendAgainstSandgate puts Sandgate in front of Sandgate: the
// remote backend drives a real gateway's DeerFlow-compatible provisioner
// API, and the sandbox_url it gets back is the gateway's proxy URL.
func TestRemoteBackendAgainstSandgate(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	r, err := remote.New(remote.Config{URL: g.URL, APIKey: "front-key"}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	spec := backend.Spec{SandboxID: identity.SandboxID("default", "remote-1"), User: "default", Thread: "remote-1"}

	info, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create through the provisioner API: %v\n%s", err, tail(g.logs.String(), 30))
	}
	if !strings.HasPrefix(info.URL, g.URL+"/c/") || info.User != "default" || info.Thread != "remote-1" {
		t.Fatalf("info = %+v", info)
	}
	code, body, _ := call(t, "POST", info.URL+"/v1/shell/exec", map[string]any{"command": "echo sandgate-in-front"})
	if code != 200 || !strings.Contains(string(body), "sandgate-in-front") {
		t.Fatalf("exec on the returned URL: %d %s", code, body)
	}
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("%d sandbox processes behind the gateway, want 1", n)
	}

	again, err := r.Create(ctx, spec)
	if err != nil || again.URL != info.URL {
		t.Errorf("second Create = %+v, %v", again, err)
	}
	if ok, err := r.Alive(ctx, info); err != nil || !ok {
		t.Errorf("Alive = %v, %v", ok, err)
	}
	found, ok, err := r.Discover(ctx, spec.SandboxID)
	if err != nil || !ok || found.URL != info.URL || found.Thread != "remote-1" {
		t.Errorf("Discover = %+v, %v, %v", found, ok, err)
	}
	list, err := r.List(ctx)
	if err != nil || len(list) != 1 || list[0].SandboxID != spec.SandboxID || list[0].URL != info.URL {
		t.Errorf("List = %+v, %v", list, err)
	}

	if err := r.Destroy(ctx, info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Errorf("%d sandbox processes left after Destroy", n)
	}
	if ok, err := r.Alive(ctx, info); err != nil || ok {
		t.Errorf("Alive after Destroy = %v, %v", ok, err)
	}
	if _, ok, err := r.Discover(ctx, spec.SandboxID); err != nil || ok {
		t.Errorf("Discover after Destroy = %v, %v", ok, err)
	}
	if err := r.Destroy(ctx, info); err != nil {
		t.Errorf("second Destroy = %v", err)
	}
}

// TestGatewayWithRemoteBackendProxiesToSandgate chains two gateways: the
// outer one's remote backend provisions through the inner one's
// provisioner API, and the outer data plane proxies to the sandbox_url it
// got back (the inner gateway's capability URL /c/{capability}, a URL with a path). The
// inner gateway requires a key: the outer one sends it as X-API-Key to the
// provisioner API and as a bearer token on the inner data plane.
func TestGatewayWithRemoteBackendProxiesToSandgate(t *testing.T) {
	t.Parallel()
	inner := newFleet(t, "--auth-api-keys", "deerflow="+sha("k")+":admin")
	ig := inner.start()
	outer := newFleet(t, "--backend", "remote", "--provisioner-url", ig.URL, "--provisioner-api-key", "k")
	og := outer.start()
	d := shell(t, og.URL, "chained", "echo through-two-gateways")
	if strings.TrimSpace(d.Output) != "through-two-gateways" {
		t.Fatalf("exec through the outer gateway: %+v", d)
	}
	if n := len(inner.sandboxes()); n != 1 {
		t.Fatalf("%d sandbox processes behind the inner gateway, want 1", n)
	}
	if code, body, _ := call(t, "DELETE", og.URL+"/threads/chained/sandbox?destroy=true", nil); code != 200 && code != 204 {
		t.Fatalf("destroy through the outer gateway: %d %s", code, body)
	}
	if n := len(inner.sandboxes()); n != 0 {
		t.Errorf("%d sandbox processes left behind the inner gateway", n)
	}
}
