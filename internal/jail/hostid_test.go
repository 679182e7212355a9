package jail

import (
	"fmt"
	"sync"
	"testing"
)

// oldCollision finds two ids that SandboxHostID, the derived id, maps to
// the same host uid: the birthday bound of its 2^24 values, a few thousand
// tries.
func oldCollision(t *testing.T) (a, b string) {
	t.Helper()
	seen := map[int]string{}
	for i := range 1 << 20 {
		id := fmt.Sprintf("%016x", i*0x9e3779b1)
		if other, ok := seen[SandboxHostID(id)]; ok {
			return other, id
		}
		seen[SandboxHostID(id)] = id
	}
	t.Fatal("no collision found")
	return "", ""
}

func TestHostIDsNeverCollide(t *testing.T) {
	t.Parallel()
	a, b := oldCollision(t)
	dir := t.TempDir()
	ids := NewHostIDs(dir)
	idA, err := ids.Assign(a)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := ids.Assign(b)
	if err != nil {
		t.Fatal(err)
	}
	if idA == idB {
		t.Fatalf("%s and %s (one derived id, %d) both got host id %d", a, b, SandboxHostID(a), idA)
	}
	// Another gateway on the same data dir (a restart) sees the same ids.
	if again, err := NewHostIDs(dir).Assign(a); err != nil || again != idA {
		t.Fatalf("Claim(%s) after a restart = %d, %v; want %d", a, again, err, idA)
	}
	// A freed id does not come back at once.
	if err := ids.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := ids.Release(a); err != nil { // nothing held: nothing to do
		t.Fatal(err)
	}
	if next, err := ids.Assign(a); err != nil || next == idA || next == idB {
		t.Fatalf("Claim(%s) after Release = %d, %v; want a new id, not %d or %d", a, next, err, idA, idB)
	}
	for _, id := range []int{idA, idB} {
		if id < allocBase || id >= allocBase+hostIDRange {
			t.Errorf("host id %d outside [%d, %d): may meet a derived one", id, allocBase, allocBase+hostIDRange)
		}
	}
}

// Gateways sharing a data dir (each its own HostIDs) claim at once.
func TestHostIDsConcurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	for g := range 4 {
		ids := NewHostIDs(dir)
		wg.Go(func() {
			for i := range 25 {
				sid := fmt.Sprintf("%08x%08x", g, i)
				id, err := ids.Assign(sid)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if other, ok := got[id]; ok {
					t.Errorf("host id %d given to %s and %s", id, other, sid)
				}
				got[id] = sid
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != 100 {
		t.Errorf("%d ids handed out, want 100", len(got))
	}
}
