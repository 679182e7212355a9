package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// newEgress builds the egress proxy the backends hand their sandboxes.
func newEgress(cfg config.Config, log *slog.Logger, metrics *telemetry.Metrics,
	denied func(backend.EgressIdentity, string, string)) (*egress.Proxy, error) {
	allow := make([]netip.Prefix, 0, len(cfg.Egress.AllowAddresses))
	for _, a := range cfg.Egress.AllowAddresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("egress_allow_addresses: %w", err) // Validate refused it already
		}
		allow = append(allow, p)
	}
	p, err := egress.New(egress.Config{DNSServer: cfg.Egress.DNS, AllowAddresses: allow,
		Log: log.With("component", "egress"), Recorder: metrics, Denied: denied})
	if err != nil {
		return nil, err
	}
	policy := cfg.Pool.Egress
	log.Info("egress policy", "mode", policy.EffectiveMode(), "allow", policy.Allow)
	return p, nil
}

// egressDenied makes a refusal of the egress proxy an egress_denied event,
// at most one per sandbox per egress_denied_every (events.Throttle): a
// loop of refused connects must not flood the stream.
func (g *Gateway) egressDenied(id backend.EgressIdentity, host, reason string) {
	if t := g.denials.Load(); t != nil {
		t.Offer(context.Background(), id.SandboxID, events.Event{Type: events.EgressDenied, SandboxID: id.SandboxID,
			User: id.User, Thread: id.Thread, Backend: g.cfg.Backend, Cause: reason, Host: host})
	}
}

// egressAuthenticator is a backend whose sandboxes reach the egress proxy
// over the network with a credential of their own, from an address it
// knows (kubernetes).
type egressAuthenticator interface {
	EgressIdentity(ctx context.Context, sandboxID, password string, source netip.Addr) (backend.EgressIdentity, error)
}

// listenEgress opens egress_listen for networked sandboxes; nil when off.
func (g *Gateway) listenEgress() (net.Listener, error) {
	if g.cfg.Egress.Listen == "" {
		return nil, nil
	}
	if _, ok := g.backend.(egressAuthenticator); !ok {
		g.log.Warn("egress_listen is set, but this backend's sandboxes reach the egress proxy another way; not listening",
			"backend", g.cfg.Backend)
		return nil, nil
	}
	ln, err := net.Listen("tcp", g.cfg.Egress.Listen)
	if err != nil {
		return nil, fmt.Errorf("egress_listen: %w", err)
	}
	return ln, nil
}

// serveEgress serves networked sandboxes on ln until the proxy shuts down.
func (g *Gateway) serveEgress(ln net.Listener) {
	auth := g.backend.(egressAuthenticator)
	g.log.Info("egress proxy listening for networked sandboxes", "addr", ln.Addr().String())
	err := g.egress.ServeAuth(ln, func(sid, password string, source netip.Addr) (backend.EgressIdentity, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		id, err := auth.EgressIdentity(ctx, sid, password, source)
		return id, err == nil
	})
	if err != nil {
		g.log.Error("egress proxy stopped", "err", err)
	}
}

// keepEgress serves the egress sockets of running sandboxes nobody serves,
// for backends whose sandboxes reach the proxy through one.
func (g *Gateway) keepEgress(ctx context.Context) {
	if s, ok := g.backend.(backend.EgressSockets); ok {
		egress.NewKeeper(g.egress, s, 0, g.log).Run(ctx)
	}
}
