package statedb

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// TestRecordKeepsSecret: a sandbox's secret survives every path a record is
// read back by (HGETALL, and the claim script's reply), so any replica can
// reach the sandbox; a record without one reads back without one.
func TestRecordKeepsSecret(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(10_000)
		withSecret := rec("s1", "i1")
		withSecret.Secret = "per-sandbox-secret-value"
		for _, r := range []state.Record{withSecret, rec("s2", "i2")} {
			if err := s.PutActive(ctx, r, now); err != nil {
				t.Fatal(err)
			}
			got, ok, err := s.Get(ctx, r.SandboxID)
			if err != nil || !ok || got.Secret != r.Secret || got.Info().Secret != r.Secret {
				t.Fatalf("get %s: secret %q, want %q (%v %v)", r.SandboxID, got.Secret, r.Secret, ok, err)
			}
			claimed, ok, err := s.Claim(ctx, r.SandboxID, "")
			if err != nil || !ok || claimed.Secret != r.Secret {
				t.Fatalf("claim %s: secret %q, want %q (%v %v)", r.SandboxID, claimed.Secret, r.Secret, ok, err)
			}
		}
	})
}
