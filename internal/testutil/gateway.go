package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// binary is one command of the module, built once per test process.
type binary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

var gatewayBin, sandboxBin binary

// GatewayBinary builds ./cmd/gateway once per test process (race detector
// off: it is the system under test, run as a separate process) and returns
// its path.
func GatewayBinary(t testing.TB) string {
	t.Helper()
	return gatewayBin.build(t, "gateway", "./cmd/gateway")
}

// SandboxBinary builds ./cmd/sandgate-sandbox, the sandbox server alone,
// once per test process and returns its path. It lands in a directory of
// its own: beside GatewayBinary's, the process backend would start it
// instead of the gateway binary (process.SandboxBinary).
func SandboxBinary(t testing.TB) string {
	t.Helper()
	return sandboxBin.build(t, sandboxspec.ServerBinary, "./cmd/sandgate-sandbox")
}

func (b *binary) build(t testing.TB, name, pkg string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "sandgate-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

// ModuleRoot is the repository root (where go.mod is).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
