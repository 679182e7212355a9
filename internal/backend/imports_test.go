package backend

import (
	"os/exec"
	"strings"
	"testing"
)

// The backends and the sandbox server share only the written contract
// (package sandboxspec): no backend, nor its tests, links the server, so a
// change of the server cannot quietly change what a backend assumes of it.
func TestBackendsDoNotLinkTheSandboxServer(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-test", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const server = "github.com/sandgate/sandgate/internal/sandbox"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == server || strings.HasPrefix(pkg, server+"/") {
			t.Errorf("a backend links %s", pkg)
		}
	}
}
