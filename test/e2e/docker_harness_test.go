package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// dockerEnv is what a test's docker-backend gateways share: the sandbox
// image, a container prefix of the test's own (so parallel tests never see
// each other's containers) and an engine client for assertions. Every
// container of the prefix is removed at cleanup, after the gateways are gone.
type dockerEnv struct {
	t      *testing.T
	api    *client.Client
	image  string
	prefix string
}

func newDockerEnv(t *testing.T) *dockerEnv {
	t.Helper()
	d := &dockerEnv{t: t, image: testutil.SandboxImage(t), api: testutil.DockerClient(t), prefix: "sge-" + randomHex(4)}
	t.Cleanup(d.removeAll) // registered before any fleet: runs after the fleets' cleanups
	return d
}

// args are the gateway flags selecting the docker backend on this env.
func (d *dockerEnv) args(extra ...string) []string {
	return append([]string{"--backend", "docker", "--image", d.image, "--container-prefix", d.prefix,
		"--docker-pull-policy", "never"}, extra...)
}

// fleet is a fleet (own Redis, data dir) of docker-backend gateways.
func (d *dockerEnv) fleet(extra ...string) *fleet {
	return newFleet(d.t, d.args(extra...)...)
}

// containers lists the env's containers in any state.
func (d *dockerEnv) containers() []container.Summary {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := d.api.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue))})
	if err != nil {
		d.t.Fatalf("list containers: %v", err)
	}
	var out []container.Summary
	for _, c := range all {
		if len(c.Names) > 0 && strings.HasPrefix(strings.TrimPrefix(c.Names[0], "/"), d.prefix+"-") {
			out = append(out, c)
		}
	}
	return out
}

// containerOf returns the id of the thread's container (the sandbox id is
// the gateway's, from its control API).
func (d *dockerEnv) containerOf(base, thread string) container.InspectResponse {
	d.t.Helper()
	sid := sandboxOf(d.t, base, thread).SandboxID
	c, err := d.api.ContainerInspect(context.Background(), d.prefix+"-"+sid)
	if err != nil {
		d.t.Fatalf("inspect the container of %s: %v", thread, err)
	}
	return c
}

func (d *dockerEnv) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range d.containers() {
		_ = d.api.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// externalIPv4 is an address of this host that is not loopback, or "".
func externalIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return ""
}
