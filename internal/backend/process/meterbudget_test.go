package process

import (
	"context"
	"fmt"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestMeterBudget: held cgroup meters stop at the budget, an eighth of
// the file limit in meters; past it a sandbox gets a meter that opens its
// files per sample, with the same figures, and a closed meter gives its
// room back (real isolated sandboxes, real cgroups).
func TestMeterBudget(t *testing.T) {
	if got := heldMetersFor(20000); got != 416 {
		t.Errorf("budget at 20000 files: %d meters, want 416", got)
	}
	p := newProcess(t, t.TempDir())
	testutil.Require(t, p.cgroups != nil && p.cgroups.Mode() != jail.CgroupNone, "cgroups for the sandboxes")
	p.meters.max = 1
	ctx := context.Background()
	var infos []backend.Info
	for i := range 2 {
		infos = append(infos, backendtest.MustCreate(t, p,
			backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "mia", fmt.Sprint("budget-", i))))
	}
	held, err := p.OpenMeter(ctx, infos[0])
	if err != nil {
		t.Fatal(err)
	}
	over, err := p.OpenMeter(ctx, infos[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held.(*cgroupMeter); !ok {
		t.Fatalf("first meter %T, want the held cgroup meter", held)
	}
	if _, ok := over.(cgroupOpener); !ok {
		t.Fatalf("meter past the budget %T, want one that opens its files per sample", over)
	}
	for _, m := range []backend.Meter{held, over} {
		st, err := m.Sample(ctx)
		if err != nil || st.PIDs < 1 || st.MemoryBytes <= 0 || st.MemoryLimitBytes <= 0 {
			t.Errorf("%T sample: %+v %v", m, st, err)
		}
	}
	held.Close()
	// The opener names its cgroup once: a sandbox gone fails its next
	// sample (which ends the sampling) rather than read another's.
	if err := p.Destroy(ctx, infos[1]); err != nil {
		t.Fatal(err)
	}
	if st, err := over.Sample(ctx); err == nil {
		t.Fatalf("sample of a destroyed sandbox by the meter past the budget: %+v, want an error", st)
	}
	// The thread's next sandbox: a cgroup of the same name, not the
	// destroyed incarnation's to read.
	next := backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "mia", "budget-1"))
	if next.SandboxID != infos[1].SandboxID || next.Incarnation == infos[1].Incarnation {
		t.Fatalf("recreated %s %s, want a new incarnation of %s", next.SandboxID, next.Incarnation, infos[1].SandboxID)
	}
	if st, err := over.Sample(ctx); err == nil {
		t.Fatalf("the destroyed incarnation's meter read its thread's next sandbox: %+v", st)
	}
	again, err := p.OpenMeter(ctx, infos[0])
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, ok := again.(*cgroupMeter); !ok {
		t.Errorf("after a held meter closed: %T, want a held one", again)
	}
}
