package jail

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestCgroupScopesKeepFleetsApart: two fleets on one host (two soaks, a
// soak and go test) serve the same thread, so the same sandbox id. Each
// places its own process under that name; freezing one fleet's sandbox
// must not freeze the other's, and removing one's cgroup must not wait for
// the other's process. Unscoped, they shared one cgroup: the other's
// sandbox froze with it, and Remove spent its 5 s retrying EBUSY and
// failed, for every sandbox of a soak's teardown (the soak "hung" there).
func TestCgroupScopesKeepFleetsApart(t *testing.T) {
	t.Parallel()
	eachFreezer(t, func(t *testing.T, c *Cgroups, name string) {
		fleets := []*Cgroups{c.WithScope("fleet-a"), c.WithScope("fleet-b")}
		var procs []*exec.Cmd
		for _, f := range fleets {
			procs = append(procs, placeSleep(t, f, name))
		}
		if err := fleets[0].Freeze(t.Context(), name, true); err != nil {
			t.Fatal(err)
		}
		if frozen, err := fleets[1].Frozen(name); err != nil || frozen {
			t.Errorf("fleet b's sandbox frozen with fleet a's: %v %v", frozen, err)
		}
		if err := fleets[0].Freeze(t.Context(), name, false); err != nil {
			t.Fatal(err)
		}
		_ = procs[0].Process.Kill()
		_ = procs[0].Wait()
		began := time.Now()
		err := fleets[0].Remove(name)
		if took := time.Since(began); err != nil || took > time.Second {
			t.Errorf("remove fleet a's cgroup while fleet b's sandbox runs: %v after %s", err, took.Round(time.Millisecond))
		}
	})
}

// TestCgroupScopeFindsUnscopedSandbox: a sandbox placed before cgroups
// were scoped (an upgrade under running sandboxes) is still frozen,
// thawed and removed through its unscoped cgroup.
func TestCgroupScopeFindsUnscopedSandbox(t *testing.T) {
	t.Parallel()
	eachFreezer(t, func(t *testing.T, c *Cgroups, name string) {
		cmd := placeSleep(t, c, name)
		scoped := c.WithScope("upgraded")
		if err := scoped.Freeze(t.Context(), name, true); err != nil {
			t.Fatal(err)
		}
		if frozen, err := c.Frozen(name); err != nil || !frozen {
			t.Errorf("the unscoped cgroup not frozen: %v %v", frozen, err)
		}
		if err := scoped.Freeze(t.Context(), name, false); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err := scoped.Remove(name); err != nil {
			t.Fatal(err)
		}
		if isDir(c.dir(c.freezer, name)) {
			t.Error("the unscoped cgroup is left")
		}
	})
}

// placeSleep places a sleeping process in c's cgroup name, removed (thawed
// first) at cleanup.
func placeSleep(t *testing.T, c *Cgroups, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = c.Freeze(context.Background(), name, false)
		_ = c.Remove(name)
	})
	if err := c.Place(name, cmd.Process.Pid, Limits{}.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	return cmd
}
