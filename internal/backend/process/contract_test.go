package process

import (
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/testutil"
)

func TestContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, harness(Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), Instance: "test"}))
}

// The same contract with process_isolation: none, the plain child process.
func TestContractNoIsolation(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, harness(Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), Instance: "test", Isolation: IsolationNone}))
}

// harness runs the contract on instances of one Config: another mode of the
// backend is one more Run with its own Config.
func harness(cfg Config) backendtest.Harness {
	return backendtest.Harness{
		Name:          Name,
		BindsHostDirs: true,
		Instance:      cfg.Instance,
		New:           func(t *testing.T) backend.Backend { return newProcessWith(t, cfg) },
	}
}

// The same contract on sandboxes started without a thread and claimed (the
// prewarm pool): a claimed sandbox must be indistinguishable.
func TestContractPrewarmed(t *testing.T) {
	t.Parallel()
	h := harness(Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), Instance: "test"})
	h.Prewarmed = true
	backendtest.Run(t, h)
}
