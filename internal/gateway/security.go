package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/router"
)

// newAuthenticator returns nil without credentials configured: the router
// then treats every request as the local user (only allowed on loopback or
// with --insecure, checked by New). The nil is returned as the interface's
// own nil, never a typed nil pointer.
func newAuthenticator(ctx context.Context, cfg auth.Config, log *slog.Logger) (router.Authenticator, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	a, err := auth.New(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return a, nil
}

// proxyConfig is cfg.Proxy plus, for the remote backend, the credential its
// provisioner's data plane wants: when the provisioner is another Sandgate,
// sandbox URLs point at its /sandboxes/{id}, which needs the same key the
// provisioner API takes. Only that origin gets it, never a sandbox.
func proxyConfig(cfg config.Config) proxy.Config {
	p := cfg.Proxy
	if cfg.Backend != "remote" || cfg.Remote.APIKey == "" {
		return p
	}
	if u, err := url.Parse(cfg.Remote.URL); err == nil && u.Host != "" {
		p.GatewayOrigin = u.Scheme + "://" + u.Host
		p.GatewayKey = cfg.Remote.APIKey
	}
	return p
}
