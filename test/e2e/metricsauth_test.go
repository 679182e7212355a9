package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/testutil"
)

// TestMetricsScrapeWithAuthOn scrapes a gateway that requires API keys the
// way the shipped Prometheus config does: its job's metrics_path and
// authorization (type + the credentials_file that the shipped compose
// add-on fills with SANDGATE_METRICS_TOKEN). The token opens /metrics and
// nothing else; without it, or with a wrong one, the scrape is 401.
func TestMetricsScrapeWithAuthOn(t *testing.T) {
	t.Parallel()
	const metricsToken = "scrape-0123456789abcdef-token"
	g := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"), "--metrics-token", metricsToken).start()

	root := testutil.ModuleRoot()
	raw, err := os.ReadFile(filepath.Join(root, "deployments", "grafana", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			Authorization struct {
				Type            string `yaml:"type"`
				CredentialsFile string `yaml:"credentials_file"`
			} `yaml:"authorization"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &prom); err != nil || len(prom.ScrapeConfigs) != 1 {
		t.Fatalf("prometheus.yml: %v %+v", err, prom)
	}
	job := prom.ScrapeConfigs[0]
	if job.Authorization.Type != "Bearer" || job.Authorization.CredentialsFile == "" {
		t.Fatalf("the shipped scrape sends no bearer token: %+v", job)
	}
	addon, err := os.ReadFile(filepath.Join(root, "deployments", "otel-collector", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(addon), `"$$SANDGATE_METRICS_TOKEN" > `+job.Authorization.CredentialsFile) {
		t.Fatalf("the compose add-on does not write SANDGATE_METRICS_TOKEN to %s", job.Authorization.CredentialsFile)
	}
	// Prometheus reads the file and sends "<type> <content>".
	credFile := filepath.Join(t.TempDir(), filepath.Base(job.Authorization.CredentialsFile))
	if err := os.WriteFile(credFile, []byte(metricsToken), 0o600); err != nil {
		t.Fatal(err)
	}
	cred, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(authorization string) (int, string) {
		t.Helper()
		r, err := http.NewRequest("GET", g.URL+job.MetricsPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.2")
		if authorization != "" {
			r.Header.Set("Authorization", authorization)
		}
		resp, err := g.client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := scrape(job.Authorization.Type + " " + strings.TrimSpace(string(cred))); code != 200 || !strings.Contains(body, "sandgate_") {
		t.Fatalf("scrape with the shipped config's token: %d %.200s", code, body)
	}
	for name, authz := range map[string]string{
		"no credential": "", "wrong token": "Bearer " + metricsToken + "x", "token prefix": "Bearer " + metricsToken[:10],
		"token without Bearer": metricsToken,
	} {
		if code, _ := scrape(authz); code != 401 {
			t.Errorf("scrape with %s: %d, want 401", name, code)
		}
	}
	// An API key still scrapes; the metrics token opens nothing else.
	if code, _ := scrape("Bearer alice-key"); code != 200 {
		t.Errorf("scrape with an API key: %d, want 200", code)
	}
	for _, path := range []string{"/threads/t/sandbox", "/api/sandboxes"} {
		if code, body, _ := (req{"GET", path, "", nil, bearer(metricsToken)}).do(t, g); code != 401 {
			t.Errorf("the metrics token on %s: %d %s, want 401", path, code, body)
		}
	}
	if strings.Contains(g.logs.String(), metricsToken) {
		t.Error("the metrics token is in the gateway's log")
	}
}
