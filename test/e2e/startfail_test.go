package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// startFails runs a gateway process that must refuse to start: it returns
// its output once it has exited non-zero, and fails the test if it is still
// running (serving) after the deadline or exits 0.
func startFails(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	base := []string{
		"--listen", "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)),
		"--data-dir", t.TempDir(),
		"--log-format", "json",
	}
	cmd := exec.CommandContext(ctx, testutil.GatewayBinary(t), append(base, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gateway %v did not refuse to start within 20s; it ran:\n%s", args, tail(out.String(), 30))
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("gateway %v: exit %v, want a refusal; output:\n%s", args, err, tail(out.String(), 30))
	}
	return out.String()
}
