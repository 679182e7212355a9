package pool

import (
	"testing"
	"time"
)

// TestOOMBursts: an incarnation's engine events less than oomBurst apart
// are one burst, published once under the first event's time; a pause
// as long as oomBurst starts another; incarnations do not share bursts.
func TestOOMBursts(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var b oomBursts
	for _, tc := range []struct {
		inc   string
		after time.Duration
		new   bool
		first time.Duration
	}{
		{"c1", 0, true, 0},
		{"c1", 300 * time.Millisecond, false, 0},
		{"c2", 400 * time.Millisecond, true, 400 * time.Millisecond},
		{"c1", 2 * time.Second, false, 0}, // 1.7 s after the last: the same burst
		{"c1", 2*time.Second + oomBurst, true, 2*time.Second + oomBurst},
		{"c2", 2*time.Second + oomBurst + time.Millisecond, true, 2*time.Second + oomBurst + time.Millisecond},
	} {
		first, isNew := b.start(tc.inc, t0.Add(tc.after))
		if isNew != tc.new || !first.Equal(t0.Add(tc.first)) {
			t.Errorf("%s at +%s: new %v first +%s; want %v, +%s", tc.inc, tc.after, isNew, first.Sub(t0), tc.new, tc.first)
		}
	}
	if len(b) != 2 {
		t.Errorf("%d bursts remembered, want the 2 open ones", len(b))
	}
}
