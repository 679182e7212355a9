package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// newEgress builds the egress proxy the backends hand their sandboxes.
func newEgress(cfg config.Config, log *slog.Logger, metrics *telemetry.Metrics) (*egress.Proxy, error) {
	allow := make([]netip.Prefix, 0, len(cfg.Egress.AllowAddresses))
	for _, a := range cfg.Egress.AllowAddresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("egress_allow_addresses: %w", err) // Validate refused it already
		}
		allow = append(allow, p)
	}
	p, err := egress.New(egress.Config{DNSServer: cfg.Egress.DNS, AllowAddresses: allow,
		Log: log.With("component", "egress"), Recorder: metrics})
	if err != nil {
		return nil, err
	}
	policy := cfg.Pool.Egress
	log.Info("egress policy", "mode", policy.EffectiveMode(), "allow", policy.Allow)
	return p, nil
}

// keepEgress serves the egress sockets of running sandboxes nobody serves,
// for backends whose sandboxes reach the proxy through one.
func (g *Gateway) keepEgress(ctx context.Context) {
	if s, ok := g.backend.(backend.EgressSockets); ok {
		egress.NewKeeper(g.egress, s, 0, g.log).Run(ctx)
	}
}
