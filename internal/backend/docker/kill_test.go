package docker

import (
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// Every way of stopping a command ends it in a container too, every time:
// the same server runs there, on busybox sh, under the engine's init.
// Code execution's timeout is not checked here: the sandbox image is
// busybox and the gateway only, it has no Python to run.
func TestStopsReachContainerCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	info := backendtest.MustCreate(t, h.backend(), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "kill"))
	backendtest.StopsReachCommands(t, info, backendtest.ShellKill, backendtest.BashKill, backendtest.HardTimeout)
}
