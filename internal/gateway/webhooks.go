package gateway

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/webhook"
)

// newWebhooks builds webhook delivery: endpoints are dialled under the
// egress proxy's address policy (its DNS server), with the webhooks' own
// exceptions, so allowing a receiver inside the network does not open it
// to sandboxes.
func newWebhooks(cfg config.Config, rdb redis.UniversalClient, keys statedb.Keys, log *slog.Logger) (*webhook.Service, error) {
	allow := make([]netip.Prefix, 0, len(cfg.WebhookAllowAddresses))
	for _, a := range cfg.WebhookAllowAddresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("webhook_allow_addresses: %w", err) // Validate refused it already
		}
		allow = append(allow, p)
	}
	wc := cfg.Webhooks
	dial, err := egress.NewDialer(egress.Config{DNSServer: cfg.Egress.DNS, AllowAddresses: allow, DialTimeout: wc.Timeout})
	if err != nil {
		return nil, err
	}
	wc.Keys = webhook.Keys{Stream: keys.Events(), Endpoints: keys.Webhooks(), Stats: keys.WebhookStats(), DeadPrefix: keys.WebhookDeadPrefix()}
	wc.Consumer, wc.Log = cfg.Pool.Instance, log
	return webhook.New(rdb, wc, dial)
}
