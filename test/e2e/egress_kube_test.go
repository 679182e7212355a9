package e2e

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/testutil"
)

// TestKubernetesEgressThroughTheGatewayProxy: a sandbox Pod (run by the
// stand-in kubelet against a real API server) gets the gateway's egress
// proxy with its own credential in HTTP_PROXY, and the gateway's
// egress_listen lets it through to the allow-listed origin only; a wrong
// credential gets 407. (The NetworkPolicy that confines the Pod to the
// proxy is checked by dry run in the kubernetes package.)
func TestKubernetesEgressThroughTheGatewayProxy(t *testing.T) {
	t.Parallel()
	testutil.Require(t, lookPath("curl"), "curl")
	w := newEgressWorld(t)
	api := testutil.StartKubeAPIServer(t)
	ns := api.Namespace(t)
	token := api.ApplyRBAC(t, ns, filepath.Join(testutil.ModuleRoot(), "deployments", "kubernetes", "rbac.yaml"))
	testutil.StartKubelet(t, api, ns, t.TempDir())
	proxyPort := strconv.Itoa(testutil.FreePort(t))
	f := newFleet(t, append(w.flags("proxy"),
		"--backend", "kubernetes",
		"--kubernetes-kubeconfig", api.Kubeconfig(t, token, ns),
		"--kubernetes-url-mode", "nodeport",
		"--kubernetes-node-host", "127.0.0.1",
		"--kubernetes-user-data-host-path", t.TempDir(),
		"--image", "sandgate-sandbox:test",
		"--egress-listen", "127.0.0.1:"+proxyPort,
		"--kubernetes-egress-proxy-url", "http://127.0.0.1:"+proxyPort,
	)...)
	g := f.start()

	out, code := run(t, g, "kube-egress", "curl -sS -m 20 "+w.url("example.internal"))
	if code != 0 || !strings.Contains(out, originBody) {
		t.Fatalf("allowed domain through the gateway's proxy: exit %d: %s", code, out)
	}
	out, _ = run(t, g, "kube-egress", "curl -sS -m 20 -w ' status=%{http_code}' "+w.url("other.internal"))
	if !strings.Contains(out, "status=403") || !strings.Contains(out, "not_allowed") {
		t.Errorf("other domain: %s", out)
	}
	out, _ = run(t, g, "kube-egress", "curl -sS -m 20 -w ' status=%{http_code}' -x http://0123456789abcdef:guess@127.0.0.1:"+proxyPort+" "+w.url("example.internal"))
	if !strings.Contains(out, "status=407") {
		t.Errorf("a guessed credential: %s", out)
	}
	if w.hits.Load() != 1 {
		t.Errorf("the origin served %d requests, want 1", w.hits.Load())
	}
}
