package router

import (
	"os/exec"
	"strings"
	"testing"
)

// The router works on the fleet's state as types (internal/state); where
// and how it is kept is the pool's and statedb's business. A direct import
// of the store would let a handler bypass the pool's locks and checks.
func TestImportsNoStore(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/sandgate/sandgate/internal/statedb", "github.com/redis/"} {
			if strings.HasPrefix(imp, banned) {
				t.Errorf("the router imports %s", imp)
			}
		}
	}
}
