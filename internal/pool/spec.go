package pool

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/sandgate/sandgate/internal/backend"
)

// template is what every sandbox of the pool is made from besides its
// identity, mounts and secret: the configured env, labels and egress
// policy, and this replica's and fleet's names.
type template struct {
	mounts          backend.MountConfig
	env, labels     map[string]string
	egress          backend.Egress
	instance, fleet string
}

func (c Config) template() template {
	return template{mounts: c.Mounts, env: c.Env, labels: c.Labels, egress: c.Egress, instance: c.Instance, fleet: c.Fleet}
}

// build completes spec (its id, identity, mounts, secret and egress set)
// with the env and the labels every sandbox gets.
func (t template) build(spec backend.Spec) backend.Spec {
	spec.Env = t.env
	spec.Labels = backend.IdentityLabels(spec, t.instance, t.labels)
	spec.Labels[backend.LabelFleet] = t.fleet
	return spec
}

// newSecret mints a sandbox's own credential: 256 random bits, base64url.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mint sandbox secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
