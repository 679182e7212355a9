package main

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPairedRatios(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		p          paired
		v          []float64
		block      int
		want       []float64
		q1, q2, q3 float64
	}{
		// Divided within each round, not median by median: the gateway's
		// slow rounds are the floor's slow rounds too.
		{"round by round", paired{floor: []float64{40, 80, 50, 60}, block: []int{0, 0, 1, 1}}, []float64{44, 84, 50, 66}, -1,
			[]float64{1, 1.05, 1.1, 1.1}, 1.05, 1.075, 1.1},
		{"one incarnation's rounds", paired{floor: []float64{40, 80, 50, 60}, block: []int{0, 0, 1, 1}}, []float64{44, 84, 50, 66}, 1,
			[]float64{1, 1.1}, 1, 1.05, 1.1},
		{"a round without requests is left out", paired{floor: []float64{40, 0, 50}, block: []int{0, 0, 0}}, []float64{42, 70, 55}, -1,
			[]float64{1.05, 1.1}, 1.05, 1.075, 1.1},
		{"fewer rounds of one", paired{floor: []float64{40, 50}, block: []int{0, 0}}, []float64{40}, -1,
			[]float64{1}, 1, 1, 1},
		{"none", paired{}, nil, -1, nil, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.p.ratios(tc.v, tc.block)
			if !slices.EqualFunc(got, tc.want, near) {
				t.Fatalf("ratios %v, want %v", got, tc.want)
			}
			if q1, q2, q3 := quartiles(got); !near(q1, tc.q1) || !near(q2, tc.q2) || !near(q3, tc.q3) {
				t.Fatalf("quartiles %v %v %v, want %v %v %v", q1, q2, q3, tc.q1, tc.q2, tc.q3)
			}
		})
	}
}

func TestPairedTableFigures(t *testing.T) {
	t.Parallel()
	unpinned := paired{gateway: []float64{44, 84, 50, 66}, floor: []float64{40, 80, 50, 60}, control: []float64{40, 76, 52, 60},
		echo: []float64{42, 80, 50, 63}, block: []int{0, 0, 1, 1}}
	pinned := paired{gateway: []float64{33, 36}, floor: []float64{30, 30}, control: []float64{30, 31}, echo: []float64{30, 33},
		block: []int{0, 0}}
	f := map[string]float64{}
	tab := pairedTable(unpinned, pinned, goalConns, f)
	if len(tab.Rows) != 2 || tab.Rows[0][1] != "2 × 2" || tab.Rows[1][1] != "1 × 2" {
		t.Fatalf("rows %v", tab.Rows)
	}
	if want := "1.075 (1.050-1.100); 1.075 1.050"; tab.Rows[0][3] != want {
		t.Errorf("gateway cell %q, want %q", tab.Rows[0][3], want)
	}
	// Against the echo floor round by round too: 44/42, 84/80, 50/50, 66/63.
	if want := "1.048 (1.048-1.050); 1.049 1.024"; tab.Rows[0][4] != want {
		t.Errorf("gateway ÷ echo floor cell %q, want %q", tab.Rows[0][4], want)
	}
	for key, want := range map[string]float64{
		pairedFigure(goalConns, "gateway", "cpu_us"):                1.075,
		pairedFigure(goalConns, controlTarget, "cpu_us"):            1,
		echoFloorFigure(goalConns, "cpu_us"):                        44.0 / 42,
		pairedFigure(goalConns, echoFloorTarget, "cpu_us"):          1.025,
		echoFloorFigure(goalConns, "cpu_us_pinned"):                 (1.1 + 36.0/33) / 2,
		pairedFigure(goalConns, "gateway", "cpu_us_pinned"):         1.15,
		pairedFigure(goalConns, controlTarget, "cpu_us_pinned"):     (1 + 31.0/30) / 2,
		proxyKey(goalConns, "paired", "cpu_us_rounds"):              4,
		proxyKey(goalConns, "paired", "cpu_us_incarnations"):        2,
		proxyKey(goalConns, "paired", "cpu_us_pinned_incarnations"): 1,
	} {
		if got := f[key]; !near(got, want) {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}
