package process

import (
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// Every way of stopping a command ends it, in the jail, every time: the
// server's threads are in Landlock domains of their own, and a signal from
// a thread other than the one that forked the command was refused (EPERM)
// while the API said the command was killed.
func TestStopsReachJailedCommands(t *testing.T) {
	t.Parallel()
	p := newProcess(t, t.TempDir())
	info := backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "kill"))
	backendtest.StopsReachCommands(t, info,
		backendtest.ShellKill, backendtest.BashKill, backendtest.HardTimeout, backendtest.CodeTimeout)
}
