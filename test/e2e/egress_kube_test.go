package e2e

import (
	"cmp"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// TestKubernetesEgressThroughTheGatewayProxy: a sandbox Pod on the real
// node gets the gateway's egress proxy with its own credential in
// HTTP_PROXY, and the gateway's egress_listen (on the node's bridge, where
// the Pods reach this host) lets it through to the allow-listed origin
// only; a guessed credential gets 407, and so does the Pod's own
// credential sent from anywhere but the Pod. (The NetworkPolicy that
// confines the Pod to the proxy is checked by dry run in the kubernetes
// package: the test node runs no policy controller.)
func TestKubernetesEgressThroughTheGatewayProxy(t *testing.T) {
	t.Parallel()
	testutil.Require(t, lookPath("curl"), "curl")
	w := newEgressWorld(t)
	c := newKubeCluster(t)
	proxy := c.node.IP + ":" + strconv.Itoa(testutil.FreePort(t))
	f := newFleet(t, append(append(w.flags("proxy"), c.flags(t)...),
		"--egress-listen", proxy,
		"--kubernetes-egress-proxy-url", "http://"+proxy,
	)...)
	g := f.start()

	// The small image's busybox wget crashes (a static glibc's resolver
	// in a FROM scratch image): nc speaks to the proxy from $HTTP_PROXY,
	// its input held open, as a client's end closed early cancels the request.
	const proxyGet = `p=${PROXY#http://}; hp=${p#*@}
{ printf 'GET %s HTTP/1.0\r\nProxy-Authorization: Basic %s\r\n\r\n' "$TARGET" "$(printf %s "${p%@*}" | base64 | tr -d '\n')"; sleep 3; } | nc -w 20 "${hp%:*}" "${hp#*:}"`
	fetch := func(target, proxyURL string) string {
		out, _ := run(t, g, "kube-egress", "PROXY="+cmp.Or(proxyURL, "$HTTP_PROXY")+" TARGET="+target+"\n"+proxyGet)
		return out
	}
	if out := fetch(w.url("example.internal"), ""); !strings.Contains(out, " 200 ") || !strings.Contains(out, originBody) {
		t.Fatalf("allowed domain through the gateway's proxy: %s", out)
	}
	if out := fetch(w.url("other.internal"), ""); !strings.Contains(out, " 403 ") || strings.Contains(out, originBody) {
		t.Errorf("other domain: %s", out)
	}
	if out := fetch(w.url("example.internal"), "http://0123456789abcdef:guess@"+proxy); !strings.Contains(out, " 407 ") || strings.Contains(out, originBody) {
		t.Errorf("a guessed credential: %s", out)
	}

	// The Pod's own credential, leaked, from the host.
	leaked := strings.TrimSpace(shell(t, g.URL, "kube-egress", "echo $HTTP_PROXY").Output)
	if !strings.Contains(leaked, "@"+proxy) {
		t.Fatalf("the Pod's HTTP_PROXY is %q", leaked)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, _ := exec.CommandContext(ctx, "curl", "-sS", "-m", "20", "-w", " status=%{http_code}", "-x", leaked, w.url("example.internal")).CombinedOutput()
	if !strings.Contains(string(res), "status=407") {
		t.Errorf("the Pod's credential from the host: %s", res)
	}
	if w.hits.Load() != 1 {
		t.Errorf("the origin served %d requests, want 1", w.hits.Load())
	}
}
