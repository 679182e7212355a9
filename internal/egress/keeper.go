package egress

import (
	"context"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// DefaultKeepInterval is how often the Keeper looks for unserved sockets.
const DefaultKeepInterval = 10 * time.Second

// answerTimeout bounds the check that someone serves a socket.
const answerTimeout = time.Second

// Keeper serves every egress socket of the running sandboxes that nobody
// answers on: a sandbox outlives the gateway process that served its proxy
// (a restart, a replica gone), and must not lose its way out with it. A
// socket another replica serves answers, and is left to it.
type Keeper struct {
	proxy   *Proxy
	sockets backend.EgressSockets
	every   time.Duration
	log     *slog.Logger
	// answers reports whether something accepts connections on a socket
	// this proxy does not serve.
	answers func(ctx context.Context, socket string) bool
}

// NewKeeper returns the keeper of the backend's sockets; every 0 =
// DefaultKeepInterval.
func NewKeeper(p *Proxy, sockets backend.EgressSockets, every time.Duration, log *slog.Logger) *Keeper {
	if every <= 0 {
		every = DefaultKeepInterval
	}
	return &Keeper{proxy: p, sockets: sockets, every: every, log: log.With("component", "egress-keeper"), answers: answers}
}

// Run passes at once (a restarted gateway serves its sandboxes before
// their next request) and then every interval, until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		k.safePass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *Keeper) safePass(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			k.log.Error("egress keeper pass panicked", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	if _, err := k.Pass(ctx); err != nil && ctx.Err() == nil {
		k.log.Warn("egress keeper pass", "err", err)
	}
}

// Pass serves the sockets nobody answers on and says how many.
func (k *Keeper) Pass(ctx context.Context) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sockets, err := k.sockets.EgressSockets(lctx)
	if err != nil {
		return 0, err
	}
	served := 0
	for _, s := range sockets {
		if k.proxy.Serves(s.Identity.SandboxID, s.Path) || k.answers(ctx, s.Path) {
			continue
		}
		if err := k.proxy.Open(s.Identity, s.Path); err != nil {
			k.log.Warn("serve egress socket", "sandbox_id", s.Identity.SandboxID, "thread", s.Identity.Thread, "err", err)
			continue
		}
		k.log.Info("serving egress proxy of a running sandbox", "sandbox_id", s.Identity.SandboxID, "thread", s.Identity.Thread)
		served++
	}
	return served, nil
}

// answers reports whether something accepts connections on socket.
func answers(ctx context.Context, socket string) bool {
	d := net.Dialer{Timeout: answerTimeout}
	c, err := backend.DialSocket(ctx, &d, socket, -1)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
