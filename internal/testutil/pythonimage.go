package testutil

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	pythonOnce    sync.Once
	pythonTag     string
	pythonArchive string
	pythonErr     error
)

// PythonImage builds the Python sandbox image with scripts/sandbox-image.sh
// once per test process and returns its tag and the path of its `docker
// save` archive. The script caches the Debian rootfs outside the clone and
// locks its cache dir, so only the first run on a machine (minutes) builds
// it and parallel test processes wait for that build.
func PythonImage(t testing.TB) (tag, archive string) {
	t.Helper()
	RequireDocker(t)
	_, err := exec.LookPath("mmdebstrap")
	Require(t, err == nil, "mmdebstrap (Debian package mmdebstrap)")
	pythonOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		pythonTag, pythonArchive, pythonErr = buildPythonImage(ctx)
	})
	if pythonErr != nil {
		t.Fatalf("python sandbox image: %v", pythonErr)
	}
	return pythonTag, pythonArchive
}

// buildPythonImage runs the script, which prints the tag and the archive's
// path as its last two lines (its progress goes to stderr).
func buildPythonImage(ctx context.Context) (string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(ModuleRoot(), "scripts", "sandbox-image.sh"))
	var stderr LogBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("scripts/sandbox-image.sh: %w\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		return "", "", fmt.Errorf("scripts/sandbox-image.sh printed %q, want the tag and the archive", out)
	}
	return lines[len(lines)-2], lines[len(lines)-1], nil
}
