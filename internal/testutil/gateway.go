package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildOut  []byte
)

// GatewayBinary builds ./cmd/gateway once per test process (race detector
// off: it is the system under test, run as a separate process) and returns
// its path.
func GatewayBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandgate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "gateway")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/gateway")
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build gateway: %v\n%s", buildErr, buildOut)
	}
	return buildPath
}

// ModuleRoot is the repository root (where go.mod is).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
