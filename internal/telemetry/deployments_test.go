package telemetry

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var deployments = filepath.Join("..", "..", "deployments")

// The dashboard queries only metrics the gateway exports (a renamed metric
// would leave a panel silently empty) and never sums the fleet-wide gauge.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(deployments, "grafana", "sandgate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	m.WatchPool(func(context.Context) (PoolCounts, error) { return PoolCounts{}, nil })
	m.Acquired("hit", time.Millisecond) // histograms appear once observed
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			exported[f.GetName()+suffix] = true
		}
	}
	name := regexp.MustCompile(`sandgate_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, n := range name.FindAllString(tg.Expr, -1) {
				if !exported[n] {
					t.Errorf("panel %q queries %s, which the gateway does not export", p.Title, n)
				}
			}
			if strings.Contains(tg.Expr, "sandgate_sandboxes") && !strings.Contains(tg.Expr, "max") {
				t.Errorf("panel %q must take max() of the fleet-wide gauge: %s", p.Title, tg.Expr)
			}
		}
	}
	if queries < 10 {
		t.Fatalf("only %d queries in the dashboard", queries)
	}
}

func TestDeploymentConfigsAreYAML(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join(deployments, "otel-collector", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(deployments, "grafana", "*", "*", "*.yaml"))
	files = append(append(files, more...), filepath.Join(deployments, "grafana", "prometheus.yml"))
	if len(files) < 5 {
		t.Fatalf("deployment files: %v", files)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
