package docker

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"

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
