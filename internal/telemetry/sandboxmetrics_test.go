package telemetry

import (
	"fmt"
	"slices"
	"testing"
)

// sampleMetrics are the sandbox collector's metrics.
var sampleMetrics = []string{"sandgate_sampled_sandboxes", "sandgate_sampled_cpu_cores", "sandgate_sampled_memory_bytes",
	"sandgate_sampled_data_bytes", "sandgate_sampled_layer_bytes", "sandgate_sampled_egress_sent_bytes", "sandgate_sampled_egress_received_bytes",
	"sandgate_sandbox_cpu_cores", "sandgate_sandbox_memory_bytes", "sandgate_sandbox_pids",
	"sandgate_sandbox_data_bytes", "sandgate_sandbox_layer_bytes", "sandgate_sandbox_egress_sent_bytes_total", "sandgate_sandbox_egress_received_bytes_total",
	"sandgate_top_sandbox_cpu_cores", "sandgate_top_sandbox_memory_bytes"}

// aggregates are the always-present series, one each, with more.
func aggregates(more map[string]int) map[string]int {
	m := map[string]int{"sandgate_sampled_sandboxes": 1, "sandgate_sampled_cpu_cores": 1, "sandgate_sampled_memory_bytes": 1,
		"sandgate_sampled_data_bytes": 1, "sandgate_sampled_layer_bytes": 1, "sandgate_sampled_egress_sent_bytes": 1,
		"sandgate_sampled_egress_received_bytes": 1}
	for k, v := range more {
		m[k] = v
	}
	return m
}

// TestSandboxSeriesAreBounded: without per-sandbox series a scrape carries
// the three aggregates and exactly min(N, sampled) top sandboxes by CPU
// and by memory, ranked, whatever the fleet; with them, one set per
// sandbox and no top. Exact series counts, by metric.
func TestSandboxSeriesAreBounded(t *testing.T) {
	t.Parallel()
	// sb-0..sb-9: CPU rises with the number, memory falls; sb-8 and sb-9
	// tie on CPU (ties go by id).
	fleet := make([]SandboxUsage, 10)
	for i := range fleet {
		fleet[i] = SandboxUsage{SandboxID: fmt.Sprintf("sb-%d", i), CPUCores: float64(min(i, 8)) / 10, MemoryBytes: int64(10-i) << 20, PIDs: 1,
			DataBytes: int64(i) << 20, LayerBytes: 1 << 10, EgressSentBytes: int64(i), EgressReceivedBytes: int64(i) * 100}
	}
	for _, tc := range []struct {
		name       string
		usage      []SandboxUsage
		perSandbox bool
		topN       int
		// want is the series count by metric; rank1 the rank-1 sandboxes.
		want             map[string]int
		rank1CPU, rank1M string
	}{
		{"top 3 of 10", fleet, false, 3, aggregates(map[string]int{"sandgate_top_sandbox_cpu_cores": 3, "sandgate_top_sandbox_memory_bytes": 3}), "sb-8", "sb-0"},
		{"top 5 of 2", fleet[:2], false, 5, aggregates(map[string]int{"sandgate_top_sandbox_cpu_cores": 2, "sandgate_top_sandbox_memory_bytes": 2}), "sb-1", "sb-0"},
		{"top none", fleet, false, 0, aggregates(nil), "", ""},
		{"per sandbox", fleet, true, 3, aggregates(map[string]int{"sandgate_sandbox_cpu_cores": 10, "sandgate_sandbox_memory_bytes": 10, "sandgate_sandbox_pids": 10,
			"sandgate_sandbox_data_bytes": 10, "sandgate_sandbox_layer_bytes": 10, "sandgate_sandbox_egress_sent_bytes_total": 10,
			"sandgate_sandbox_egress_received_bytes_total": 10}), "", ""},
		{"nothing sampled", nil, false, 3, aggregates(nil), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics()
			m.WatchSandboxes(func() []SandboxUsage { return tc.usage }, tc.perSandbox, tc.topN)
			families, err := m.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, f := range families {
				if slices.Contains(sampleMetrics, f.GetName()) {
					got[f.GetName()] = len(f.GetMetric())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("series by metric %v, want %v", got, tc.want)
			}
			// The disk and egress sums are the fleet's.
			var want SandboxUsage
			for _, u := range tc.usage {
				want.DataBytes += u.DataBytes
				want.LayerBytes += u.LayerBytes
				want.EgressSentBytes += u.EgressSentBytes
				want.EgressReceivedBytes += u.EgressReceivedBytes
			}
			for name, v := range map[string]int64{"sandgate_sampled_data_bytes": want.DataBytes, "sandgate_sampled_layer_bytes": want.LayerBytes,
				"sandgate_sampled_egress_sent_bytes": want.EgressSentBytes, "sandgate_sampled_egress_received_bytes": want.EgressReceivedBytes} {
				if got := value(t, m, name, nil); got != float64(v) {
					t.Errorf("%s = %v, want %d", name, got, v)
				}
			}
			if tc.perSandbox && value(t, m, "sandgate_sandbox_egress_received_bytes_total", map[string]string{"sandbox_id": "sb-7"}) != 700 {
				t.Error("sb-7's received bytes are not its own 700")
			}
			if tc.rank1CPU == "" {
				return
			}
			if v := value(t, m, "sandgate_top_sandbox_cpu_cores", map[string]string{"rank": "1", "sandbox_id": tc.rank1CPU}); v < 0 {
				t.Errorf("rank 1 by CPU is not %s", tc.rank1CPU)
			}
			if v := value(t, m, "sandgate_top_sandbox_memory_bytes", map[string]string{"rank": "1", "sandbox_id": tc.rank1M}); v != float64(10<<20) {
				t.Errorf("rank 1 by memory: %v, want %s's 10 MiB", v, tc.rank1M)
			}
			if tc.topN == 3 && value(t, m, "sandgate_top_sandbox_cpu_cores", map[string]string{"rank": "2", "sandbox_id": "sb-9"}) != 0.8 {
				t.Error("rank 2 by CPU is not sb-9 (tied with sb-8, after it by id)")
			}
		})
	}
}
