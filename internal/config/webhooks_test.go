package config

import (
	"strings"
	"testing"
	"time"
)

// The YAML `webhook_endpoints:` list and the webhooks block: secrets come
// from the environment, timings nest under webhooks:, and a mistake (a bad
// URL, a claim idle a live replica's retries would outlast, a CIDR that is
// not one) stops the start.
func TestWebhooksConfig(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	c, _, err := loadWith(t, []string{"--webhook-allow-addresses", "10.1.0.0/16"}, map[string]string{"HOOK_SECRET": secret}, `
webhooks: {max_age: 1h, claim_idle: 2m, dead_letters: 50}
webhook_endpoints:
  - id: billing
    url: https://hooks.example/sandgate
    events: [ready, destroyed]
    secret: $HOOK_SECRET
`)
	if err != nil {
		t.Fatal(err)
	}
	w := c.Webhooks
	if len(w.Endpoints) != 1 || w.Endpoints[0].Secret != secret || len(w.Endpoints[0].Events) != 2 || w.Endpoints[0].ID != "billing" {
		t.Fatalf("endpoints %+v", w.Endpoints)
	}
	if w.MaxAge != time.Hour || w.ClaimIdle != 2*time.Minute || w.DeadLetters != 50 || c.WebhookAllowAddresses[0] != "10.1.0.0/16" {
		t.Fatalf("webhooks %+v allow %v", w, c.WebhookAllowAddresses)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad url", "webhook_endpoints:\n  - {id: a, url: 'ftp://x', secret: " + secret + "}\n", "url must be"},
		{"no secret", "webhook_endpoints:\n  - {id: a, url: 'https://x/'}\n", "secret must be"},
		{"twice", "webhook_endpoints:\n  - {id: a, url: 'https://x/', secret: " + secret + "}\n  - {id: a, url: 'https://y/', secret: " + secret + "}\n", "configured twice"},
		{"claim idle too short", "webhook_claim_idle: 20s\n", "claim idle"},
		{"bad cidr", "webhook_allow_addresses: [10.1.2.3/8]\n", "webhook_allow_addresses"},
		{"unknown key", "webhook_endpoints:\n  - {id: a, ulr: x}\n", "ulr"},
	} {
		_, _, err := loadWith(t, nil, nil, tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
