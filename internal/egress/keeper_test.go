package egress

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

type socketList []backend.EgressSocket

func (l socketList) EgressSockets(context.Context) ([]backend.EgressSocket, error) { return l, nil }

// TestKeeperLeavesItsOwnSockets: a pass dials no socket this proxy serves
// (at 5,000 sandboxes it dialled and accepted 5,000 every 10 s), yet a
// socket file replaced under it is judged by dialling, and one removed is
// served again.
func TestKeeperLeavesItsOwnSockets(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	k := NewKeeper(f.p, socketList{{Identity: f.id, Path: f.socket}}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var dials atomic.Int32
	k.answers = func(ctx context.Context, socket string) bool {
		dials.Add(1)
		return answers(ctx, socket)
	}
	ctx := context.Background()

	if n, err := k.Pass(ctx); n != 0 || err != nil || dials.Load() != 0 {
		t.Fatalf("own socket: served %d (%v), dialled %d; want 0, 0", n, err, dials.Load())
	}

	// Someone else's listener at the path now: it answers, and is left to it.
	if err := os.Remove(f.socket); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	if f.p.Serves(f.id.SandboxID, f.socket) {
		t.Fatal("Serves: true for a socket file another listener made")
	}
	if n, err := k.Pass(ctx); n != 0 || err != nil || dials.Load() != 1 {
		t.Fatalf("replaced socket: served %d (%v), dialled %d; want 0, 1", n, err, dials.Load())
	}

	// Nobody at the path: the keeper serves it again, and it proxies.
	other.Close()
	_ = os.Remove(f.socket)
	if n, err := k.Pass(ctx); n != 1 || err != nil {
		t.Fatalf("removed socket: served %d (%v), want 1", n, err)
	}
	if !f.p.Serves(f.id.SandboxID, f.socket) {
		t.Fatal("Serves: false for the socket the keeper opened again")
	}
	c, err := net.Dial("unix", f.socket)
	if err != nil {
		t.Fatalf("the socket opened again does not answer: %v", err)
	}
	c.Close()
	if n, _ := k.Pass(ctx); n != 0 || dials.Load() != 2 {
		t.Fatalf("after the repair: served %d, dialled %d in all; want 0, 2", n, dials.Load())
	}

	f.p.Close(f.id.SandboxID)
	if f.p.Serves(f.id.SandboxID, f.socket) {
		t.Fatal("Serves: true after Close")
	}
}
