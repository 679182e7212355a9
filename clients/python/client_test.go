// Package python runs the Python client's unittest suite (clients/python,
// package sandgate) and the README's Python example against a real
// gateway (process backend, real redis-server).
package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// python3 finds the interpreter; under CI=true its absence fails.
func python3(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("python3")
	testutil.Require(t, err == nil, "python3")
	return bin
}

// run runs python3 args in this directory with the gateway's URL and key.
func run(t *testing.T, g *testutil.Gateway, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, python3(t), args...)
	cmd.Dir = dir
	// urllib would send loopback requests to a configured HTTP proxy.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1", "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1",
		"SANDGATE_URL="+g.URL, "SANDGATE_KEY="+g.Key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s\ngateway logs:\n%s", strings.Join(args, " "), err, out, g.Logs)
	}
	return string(out)
}

// templates are the gateway's for TestPythonClient, which
// tests/test_client.py expects.
const templates = `templates:
  - name: plain
  - name: marked
    env: {TEMPLATE_MARK: marked-template}
default_template: plain
`

// TestPythonClient runs tests/test_client.py: threads, exec (streamed and
// not), files, checkpoints, fork, freeze and thaw, templates, preview
// links (opened without a key, then revoked) and errors.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "templates.yaml")
	if err := os.WriteFile(cfg, []byte(templates), 0o644); err != nil {
		t.Fatal(err)
	}
	g := testutil.StartGateway(t, "--config", cfg)
	out := run(t, g, "-m", "unittest", "discover", "-s", "tests", "-v")
	if !strings.Contains(out, "OK") || strings.Contains(out, "skipped") {
		t.Fatalf("unittest did not pass every test:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestREADMEPythonExample runs the README's Python example exactly as
// written (the code block between the python-example markers).
func TestREADMEPythonExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok1 := strings.Cut(string(readme), "<!-- python-example:begin -->")
	block, _, ok2 := strings.Cut(block, "<!-- python-example:end -->")
	_, code, ok3 := strings.Cut(block, "```python\n")
	code, _, ok4 := strings.Cut(code, "```")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		t.Fatal("README.md lacks the python-example block")
	}
	g := testutil.StartGateway(t)
	out := run(t, g, "-c", code)
	for _, want := range []string{"hello from 42", "notes.txt", "ck-"} {
		if !strings.Contains(out, want) {
			t.Errorf("the README example printed no %q:\n%s", want, out)
		}
	}
}
