package testutil

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RegistryBinary is Debian's docker-registry (package docker-registry):
// a real registry that needs no image pulled to run.
const RegistryBinary = "/usr/bin/docker-registry"

// StartRegistry runs an empty registry on a free loopback port, storing in
// a temporary directory, until the test ends, and returns its host:port.
// Docker and go-containerregistry speak plain HTTP to 127.0.0.0/8. Missing
// the binary skips, or fails under CI=true.
func StartRegistry(t testing.TB) string {
	t.Helper()
	_, err := os.Stat(RegistryBinary)
	Require(t, err == nil, "docker-registry ("+RegistryBinary+", Debian package docker-registry)")
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &LogBuffer{}
	cmd := exec.Command(RegistryBinary, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start docker-registry: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
