package e2e

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

// TestREADMEQuickStartRuns pastes the README's first curl walk-through
// into sh against a real gateway, as a reader would: every line must work
// as written, the restore line included (issue 40, point 6: it named a
// literal checkpoint id and answered 404).
func TestREADMEQuickStartRuns(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("curl")
	testutil.Require(t, err == nil, "curl (Debian package curl)")
	readme, err := os.ReadFile(filepath.Join(testutil.ModuleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\n# First call:")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README has no quick-start block starting '# First call:'")
	}
	f := newFleet(t)
	g := f.start()
	script := "set -eu\n# First call:" + strings.ReplaceAll(block, "http://127.0.0.1:8080", g.URL) +
		"\necho; echo CK=$ck\n" +
		"curl -s -X POST " + g.URL + "/threads/demo/v1/file/read -H 'Content-Type: application/json' " +
		`-d '{"file": "/mnt/user-data/workspace/notes.txt"}'` + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", script).CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("the README block failed: %v\n%s", err, text)
	}
	for _, want := range []string{`"restored":{"id":"ck-`, "\nCK=ck-", `"content":"hello\n"`, `"code":"bad_request"`} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, `"not_found"`) || strings.Contains(text, "checkpoint_not_found") {
		t.Errorf("a line answered not found:\n%s", text)
	}
}
