package statedb

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// TestRecordKeepsSecret: a sandbox's secret and port host survive every
// path a record is read back by (HGETALL, and the claim script's reply),
// so any replica can reach the sandbox and its ports; a record without
// them reads back without them.
func TestRecordKeepsSecret(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(10_000)
		withSecret := rec("s1", "i1")
		withSecret.Secret = "per-sandbox-secret-value"
		withSecret.PortHost = "172.17.0.9"
		for _, r := range []state.Record{withSecret, rec("s2", "i2")} {
			if err := s.PutActive(ctx, r, now); err != nil {
				t.Fatal(err)
			}
			got, ok, err := s.Get(ctx, r.SandboxID)
			if err != nil || !ok || got.Secret != r.Secret || got.Info().Secret != r.Secret || got.Info().PortHost != r.PortHost {
				t.Fatalf("get %s: secret %q port host %q, want %q %q (%v %v)", r.SandboxID, got.Secret, got.PortHost, r.Secret, r.PortHost, ok, err)
			}
			claimed, ok, err := s.Claim(ctx, r.SandboxID, "")
			if err != nil || !ok || claimed.Secret != r.Secret || claimed.PortHost != r.PortHost {
				t.Fatalf("claim %s: secret %q port host %q, want %q %q (%v %v)", r.SandboxID, claimed.Secret, claimed.PortHost, r.Secret, r.PortHost, ok, err)
			}
		}
	})
}
