package docker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend"
)

// lateEngine is an engine whose first pause takes effect only after the
// next unpause was answered, as containerd's pause can (it returns once
// asked): the unpause lands first and the container ends up paused.
type lateEngine struct {
	engine   // the methods Thaw does not call stay nil
	mu       sync.Mutex
	paused   bool
	late     bool // a pause still to take effect
	unpauses int
}

func (e *lateEngine) ContainerUnpause(context.Context, string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unpauses++
	e.paused = false
	if e.late {
		e.paused, e.late = true, false
	}
	return nil
}

func (e *lateEngine) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &container.State{Running: true, Paused: e.paused}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: st}}, nil
}

// A thaw overtaken by the pause before it unpauses again until the
// container runs (TestDockerPauseWarm once found a reclaimed sandbox still
// paused: the engine had answered the pause before it took effect).
func TestThawOutlastsALatePause(t *testing.T) {
	t.Parallel()
	e := &lateEngine{paused: true, late: true}
	d := newWithEngine(Config{}, e, slog.New(slog.DiscardHandler))
	if err := d.Thaw(context.Background(), backend.Info{SandboxID: "0123456789abcdef", Incarnation: "c1"}); err != nil {
		t.Fatal(err)
	}
	if e.paused || e.unpauses != 2 {
		t.Fatalf("after Thaw: paused=%v after %d unpauses, want running after 2", e.paused, e.unpauses)
	}
}

// stuckEngine is an engine whose freezer gives up the first fails pauses
// ("unable to freeze", as runc answers when a cgroup v1 freezer stays
// FREEZING on a loaded host) and freezes on the next one; or, with down,
// an engine that cannot be reached, or with stopped, a container that
// no longer runs.
type stuckEngine struct {
	engine // the methods Freeze does not call stay nil
	mu     sync.Mutex
	fails  int
	down   bool
	stop   bool
	paused bool
	pauses int
}

func (e *stuckEngine) ContainerPause(context.Context, string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pauses++
	switch {
	case e.down:
		return client.ErrorConnectionFailed("unix:///var/run/docker.sock")
	case e.stop:
		return errors.New("Error response from daemon: container c1 is not running")
	case e.pauses <= e.fails:
		return errors.New("Error response from daemon: Cannot pause container c1: OCI runtime pause failed: unable to freeze: unknown")
	}
	e.paused = true
	return nil
}

func (e *stuckEngine) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &container.State{Running: !e.stop, Paused: e.paused}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: st}}, nil
}

// A freeze the freezer gave up on is tried again while the container runs
// unpaused (CI once failed TestPauseResumeDestroy on runc's "unable to
// freeze"); a stopped container or an engine out of reach is not, and
// retries are bounded.
func TestFreezeOutlastsAStuckFreezer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		e          *stuckEngine
		wantErr    bool
		wantPauses int
	}{
		{"stuck twice", &stuckEngine{fails: 2}, false, 3},
		{"stuck for good", &stuckEngine{fails: 100}, true, freezeTries},
		{"stopped", &stuckEngine{stop: true}, true, 1},
		{"engine down", &stuckEngine{down: true}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newWithEngine(Config{}, tc.e, slog.New(slog.DiscardHandler))
			err := d.Freeze(context.Background(), backend.Info{SandboxID: "0123456789abcdef", Incarnation: "c1"})
			if (err != nil) != tc.wantErr || tc.e.pauses != tc.wantPauses || tc.e.paused == tc.wantErr {
				t.Fatalf("Freeze = %v after %d pauses (paused %v); want error %v after %d", err, tc.e.pauses, tc.e.paused, tc.wantErr, tc.wantPauses)
			}
		})
	}
}
