package process

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/testutil"
)

// Every process a command starts has the commands' process limit from its
// first instruction: the first thing each command here does is fork a
// program that reads its own limits, many times over and in parallel (a
// limit set on the shell after it started misses what it forked meanwhile).
func TestCommandLimitBeforeFirstFork(t *testing.T) {
	t.Parallel()
	p := newProcessWith(t, Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), Instance: "test",
		Limits: jail.Limits{Processes: 64}})
	info := backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "nproc"))
	want := "Max processes 64 64 processes"
	for i := range 60 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			res := backendtest.Exec(t, info, "grep 'Max processes' /proc/self/limits")
			if got := strings.Join(strings.Fields(res.Output), " "); got != want {
				t.Errorf("a command's first child has %q, want %q", got, want)
			}
		})
	}
}
