package e2e

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// startFails runs a gateway process that must refuse to start and returns
// its output once it has exited non-zero. A gateway that starts serving
// ("gateway listening" in its log) fails the test at once; one that neither
// exits nor serves within 20 s fails it then.
func startFails(t *testing.T, env []string, args ...string) string {
	t.Helper()
	base := []string{
		"--listen", "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)),
		"--data-dir", t.TempDir(),
		"--log-format", "json",
	}
	cmd := exec.Command(testutil.GatewayBinary(t), append(base, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out := &testutil.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() { _ = cmd.Process.Kill(); <-done }
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("gateway %v: exit %v, want a refusal; output:\n%s", args, err, tail(out.String(), 30))
			}
			return out.String()
		case <-tick.C:
			if strings.Contains(out.String(), "gateway listening") {
				stop()
				t.Fatalf("gateway %v started instead of refusing:\n%s", args, tail(out.String(), 30))
			}
		case <-deadline:
			stop()
			t.Fatalf("gateway %v neither refused nor served within 20s:\n%s", args, tail(out.String(), 30))
		}
	}
}
