package e2e

import (
	"testing"

	"github.com/sandgate/sandgate/internal/backend/docker"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestTCPImagePorts: a docker image without Sandgate's server label (a
// "TCP image", as the all-in-one sandbox is: its own entrypoint serves the
// API on a network) has no bridge, so the gateway dials the container's
// own address for a port. Servers the sandbox starts on its network
// address (not loopback: the image here is Sandgate's server labelled as a
// TCP image, whose bridge would reach loopback only, so the test fails if
// the request takes the bridge), ports 3000 and 3001, answer through the
// path route, the host route and a preview link
// (both forms); a closed port is the gateway's own 502 naming it within
// 1 s, not a re-resolve; a link for 3000 never opens 3001; bob's
// credential never opens alice's.
func TestTCPImagePorts(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	image := testutil.DerivedImage(t, d.image, `LABEL `+docker.LabelServer+`=""`)
	g := newSecuredFleet(t, append(d.args("--image", image), "--preview-suffix", previewSuffix)...).start()
	checkPortsAndLinks(t, g, "$(hostname -i)")
}

// TestKubernetesTCPImagePorts is TestTCPImagePorts on the kubernetes
// backend without kubernetes_server: the image's own entrypoint serves the
// API, and a port is dialled on the Pod's IP.
func TestKubernetesTCPImagePorts(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	g := newSecuredFleet(t, append(c.flags(t), "--kubernetes-server", "", "--preview-suffix", previewSuffix)...).start()
	checkPortsAndLinks(t, g, "$(hostname -i)")
}
