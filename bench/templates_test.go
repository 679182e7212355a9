package main

import (
	"slices"
	"strings"
	"testing"
)

func TestPickTemplate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		u    float64
		want string
	}{
		{0, "python"}, {0.49, "python"}, {0.5, "shell"}, {0.74, "shell"}, {0.75, "python-data"},
		{0.89, "python-data"}, {0.9, "small"}, {0.9999, "small"},
	} {
		if got := pickTemplate(tc.u); got != tc.want {
			t.Errorf("pickTemplate(%g) = %s, want %s", tc.u, got, tc.want)
		}
	}
}

// TestPoolTable: a row every tplTableInterval plus the last sample, and
// the fewest and most each template had.
func TestPoolTable(t *testing.T) {
	t.Parallel()
	m := mixRound{seed: 7, series: map[string][]float64{
		"t_ms": {0, 1000, 2100, 3000, 4200, 4500}, "arrived": {0, 1, 2, 3, 4, 4}, "claimed": {0, 1, 2, 3, 3, 4},
		"python": {3, 2, 0, 1, 2, 3}, "shell": {3, 3, 3, 3, 3, 3}, "python-data": {3, 3, 2, 3, 3, 3}, "small": {3, 1, 2, 3, 3, 3},
	}}
	tab := m.poolTable()
	var times []string
	for _, r := range tab.Rows {
		if len(r) != len(tab.Columns) {
			t.Fatalf("row %v has %d cells, want %d", r, len(r), len(tab.Columns))
		}
		times = append(times, r[0])
	}
	if want := []string{"0.00", "2.10", "4.20", "4.50", "fewest", "most"}; !slices.Equal(times, want) {
		t.Errorf("rows at %v, want %v", times, want)
	}
	if low := tab.Rows[len(tab.Rows)-2][3:]; !slices.Equal(low, []string{"0", "3", "2", "1"}) {
		t.Errorf("fewest %v, want [0 3 2 1] (python, shell, python-data, small)", low)
	}
	if high := tab.Rows[len(tab.Rows)-1][3:]; !slices.Equal(high, []string{"3", "3", "3", "3"}) {
		t.Errorf("most %v, want [3 3 3 3]", high)
	}
}

// TestSwing: the template holding the most against its share is named,
// with its round and time.
func TestSwing(t *testing.T) {
	t.Parallel()
	m := mixResult{{seed: 1, series: map[string][]float64{"t_ms": {0, 750},
		"python": {3, 1}, "shell": {3, 1}, "python-data": {3, 1}, "small": {3, 9}}}}
	if got, want := m.swing(), "small's 9 of 12 (it has 10 % of arrivals, 1.2 of 12 by that share) at 0.75 s in the round with seed 1"; !strings.Contains(got, want) {
		t.Errorf("swing: %q, want it to contain %q", got, want)
	}
}
