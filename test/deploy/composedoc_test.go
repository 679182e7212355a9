package deploy

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeploymentDocMatchesCompose reads compose.yaml and what
// DEPLOYMENT.md says of it (issue 40, point 12: the doc said compose
// sandboxes run as the gateway's uid and keep outbound internet access;
// measured, each has a uid of its own and `lo` only). Offline: no tool.
func TestDeploymentDocMatchesCompose(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(repoPath("compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf struct {
		Services map[string]struct {
			User        string            `yaml:"user"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatal(err)
	}
	gw, ok := cf.Services["gateway"]
	if !ok {
		t.Fatal("compose.yaml has no gateway service")
	}
	env := gw.Environment
	doc, err := os.ReadFile(repoPath("docs", "DEPLOYMENT.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	if i := strings.Index(section, "Choices, and why:"); i >= 0 {
		section = section[i:]
		if j := strings.Index(section, "\n## "); j >= 0 {
			section = section[:j]
		}
	} else {
		t.Fatal("DEPLOYMENT.md has no compose 'Choices, and why:' list")
	}
	section = strings.Join(strings.Fields(section), " ") // across line breaks

	// The uid: without SANDGATE_DOCKER_USER the docker backend gives each
	// sandbox a uid of its own.
	if _, set := env["SANDGATE_DOCKER_USER"]; set {
		t.Fatalf("compose.yaml sets SANDGATE_DOCKER_USER; update this test and the doc together")
	}
	if !strings.Contains(section, "a host uid of its own") || strings.Contains(section, "as the gateway's uid") {
		t.Errorf("DEPLOYMENT.md does not say compose sandboxes run as a uid of their own:\n%s", section)
	}
	// The gateways are not root (they cannot chown): the doc's group story.
	if !strings.HasPrefix(gw.User, "${SANDGATE_UID:-65532}") || !strings.Contains(section, "2770") {
		t.Errorf("gateway user %q, or the doc lacks the unprivileged gateway's 2770 dirs", gw.User)
	}
	// The network: egress proxy by default, so Sandgate's image gets `lo` only.
	if env["SANDGATE_EGRESS"] != "${SANDGATE_EGRESS:-proxy}" {
		t.Fatalf("compose.yaml SANDGATE_EGRESS = %q; update this test and the doc together", env["SANDGATE_EGRESS"])
	}
	if !strings.Contains(section, "no interface but `lo`") {
		t.Errorf("DEPLOYMENT.md does not say compose sandboxes have `lo` only")
	}
	for _, wrong := range []string{"keep outbound internet access", "Sandboxes run as the gateway's uid"} {
		if strings.Contains(section, wrong) {
			t.Errorf("DEPLOYMENT.md still says %q", wrong)
		}
	}
}
