package docker

import (
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// TestContract runs the shared contract on the real engine; every instance
// is a backend of its own (an engine client of its own) on one prefix.
func TestContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, contractHarness(t))
}

// The same contract on containers started without a thread and claimed
// (the prewarm pool): renamed, with a claim record, a claimed container
// must be indistinguishable from a created one, from any instance.
func TestContractPrewarmed(t *testing.T) {
	t.Parallel()
	c := contractHarness(t)
	c.Prewarmed = true
	backendtest.Run(t, c)
}

func contractHarness(t *testing.T) backendtest.Harness {
	h := newHarness(t)
	return backendtest.Harness{
		Name:          Name,
		BindsHostDirs: true,
		Instance:      "test",
		New:           func(*testing.T) backend.Backend { return h.backend() },
	}
}
