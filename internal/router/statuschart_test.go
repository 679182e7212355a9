package router

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/backend"
)

// historySampler answers a fixed history of three samples (the first
// without a CPU %: it has no sample before it) and records whom it was
// asked about.
type historySampler struct {
	mu    sync.Mutex
	asked []backend.Info
}

func (h *historySampler) Metrics(_ context.Context, info backend.Info) (api.SandboxMetrics, error) {
	h.mu.Lock()
	h.asked = append(h.asked, info)
	h.mu.Unlock()
	pct := func(v float64) *float64 { return &v }
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := api.SandboxMetrics{SandboxID: info.SandboxID, History: []api.MetricsSample{
		{At: at, MemoryBytes: 10 << 20, MemoryLimitBytes: 80 << 20},
		{At: at.Add(time.Second), CPUPercent: pct(50), MemoryBytes: 20 << 20, MemoryLimitBytes: 80 << 20},
		{At: at.Add(2 * time.Second), CPUPercent: pct(100), MemoryBytes: 40 << 20, MemoryLimitBytes: 80 << 20,
			DiskEgress: api.DiskEgress{DataBytes: 21 << 20, LayerBytes: 3 << 20, EgressSentBytes: 1 << 19, EgressReceivedBytes: 5 << 20}},
	}}
	m.Latest = &m.History[len(m.History)-1]
	return m, nil
}

func (h *historySampler) Watch(context.Context, backend.Info) (<-chan api.MetricsSample, func(), error) {
	return nil, nil, backend.Unsupported("metrics", "not in this test")
}
func (h *historySampler) KeepWatching(string) {}
func (h *historySampler) Latest(string) (api.MetricsSample, bool) {
	return api.MetricsSample{}, false
}

// TestStatusDetailCharts: a sandbox's page (and its live part) draws the
// sampler's history of that sandbox as inline SVG, no script needed: CPU
// % against one core, memory against the limit, at exact points, and the
// latest sample's disk and egress figures.
func TestStatusDetailCharts(t *testing.T) {
	t.Parallel()
	hs := &historySampler{}
	g := newStatusGatewayWith(t, hs)
	cookie, _ := g.login("alice-key")
	for _, path := range []string{"/status/sandboxes/" + g.alice, "/status/sandboxes/" + g.alice + "?part=live"} {
		code, page := g.do("GET", path, "", "Cookie", cookie)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, page)
		}
		for _, want := range []string{
			// CPU: 50 % then 100 % of a 100 % scale, left to right.
			`<figure class="chart chart-cpu">`, `points="0.0,24.0 240.0,0.0"`, "CPU %: 100.0 % (scale 100 %, 2 samples)",
			// Memory: 10, 20, 40 MiB of the 80 MiB limit.
			`<figure class="chart chart-memory">`, `points="0.0,42.0 120.0,36.0 240.0,24.0"`, "Memory: 40.0 MiB (scale 80.0 MiB, 3 samples)",
			// The latest sample's disk and egress figures.
			`<td class="data">21.0 MiB</td>`, `<td class="layer">3.0 MiB</td>`, `<td class="egress">0.5 MiB sent, 5.0 MiB received</td>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("%s lacks %q:\n%s", path, want, page)
			}
		}
		if strings.Count(page, "<svg ") != 2 {
			t.Errorf("%s: %d charts, want 2", path, strings.Count(page, "<svg "))
		}
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if len(hs.asked) != 2 || hs.asked[0].SandboxID != g.alice || hs.asked[0].Incarnation == "" {
		t.Fatalf("sampler asked about %+v, want alice's sandbox (with its incarnation) twice", hs.asked)
	}
}
