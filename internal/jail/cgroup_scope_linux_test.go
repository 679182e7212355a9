package jail

import (
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
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs = append(procs, cmd)
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				_ = f.Freeze(t.Context(), name, false)
				_ = f.Remove(name)
			})
			if err := f.Place(name, cmd.Process.Pid, Limits{}.WithDefaults()); err != nil {
				t.Fatal(err)
			}
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
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = c.Freeze(t.Context(), name, false)
			_ = c.Remove(name)
		})
		if err := c.Place(name, cmd.Process.Pid, Limits{}.WithDefaults()); err != nil {
			t.Fatal(err)
		}
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
