package pool

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/sandgate/sandgate/internal/backend"
)

// recipe is what every sandbox of the pool is made from besides its
// identity, mounts, secret and template: the configured env, labels and
// egress policy, and this replica's and fleet's names.
type recipe struct {
	mounts          backend.MountConfig
	env, labels     map[string]string
	egress          backend.Egress
	instance, fleet string
}

func (c Config) recipe() recipe {
	return recipe{mounts: c.Mounts, env: c.Env, labels: c.Labels, egress: c.Egress, instance: c.Instance, fleet: c.Fleet}
}

// build completes spec (its id, identity, mounts, secret, egress and
// template set) with env and the labels every sandbox gets.
func (r recipe) build(spec backend.Spec, env map[string]string) backend.Spec {
	spec.Env = env
	spec.Labels = backend.IdentityLabels(spec, r.instance, r.labels)
	spec.Labels[backend.LabelFleet] = r.fleet
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
