package statedb

import (
	"slices"
	"strings"
	"testing"
)

// TestKeysSpreadOverSlots pins the layout's placement: every key of a
// sandbox shares the sandbox's slot, every fleet key the fleet's, every
// index of a bucket shares the bucket's, and the buckets sit evenly over the slot space, so nodes that
// own contiguous ranges of it (redis-cli --cluster create) hold N/k each,
// within one.
func TestKeysSpreadOverSlots(t *testing.T) {
	t.Parallel()
	if got := slot("123456789"); got != 12739 { // CRC-16/XMODEM check value 0x31C3, mod 16384
		t.Fatalf("slot(123456789) = %d, want 12739", got)
	}
	k := NewKeys("", 0)
	if strings.ContainsAny(k.prefix, "{}") || k.prefix != "sandgate:default:" {
		t.Fatalf("prefix %q keeps layout 1's hash tag", k.prefix)
	}
	sid := "0123456789abcdef"
	for _, key := range []string{k.Lock(sid), k.Egress(sid)} {
		if slot(key) != slot(k.Sandbox(sid)) {
			t.Fatalf("%s is not in its sandbox's slot", key)
		}
	}
	fleet := k.fleetKeys()
	for _, key := range []string{k.Prewarm(), k.Creating(), k.PrewarmFP(), k.Claims()} {
		if !slices.Contains(fleet, key) {
			t.Fatalf("%s is not one of the fleet scripts' keys", key)
		}
	}
	for _, key := range append(fleet, k.Events()) {
		if slot(key) != slot(k.Prewarm()) {
			t.Fatalf("%s is not in the fleet's slot", key)
		}
	}
	for _, n := range []int{16, 64, 256} {
		k := NewKeys("p:", n)
		for _, nodes := range []int{3, 5, 8} {
			per := make([]int, nodes)
			for b := range n {
				s := slot(k.Active(b))
				for _, key := range []string{k.Reg(b), k.Warm(b), k.Lease(b), k.buckets[b].seq} {
					if slot(key) != s {
						t.Fatalf("bucket %d of %d: %s is not in the bucket's slot", b, n, key)
					}
				}
				// redis-cli gives node i the slots from i*16384/nodes on.
				per[s*nodes/clusterSlots]++
			}
			lo, hi := n, 0
			for _, c := range per {
				lo, hi = min(lo, c), max(hi, c)
			}
			if hi-lo > 1 {
				t.Errorf("%d buckets over %d nodes: %v per node", n, nodes, per)
			}
		}
	}
}
