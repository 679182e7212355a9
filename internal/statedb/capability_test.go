package statedb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

func TestCapabilityLifecycle(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		t0 := time.UnixMilli(10_000)
		opens := func(capability string) (string, bool) {
			t.Helper()
			if !state.ValidCapability(capability) {
				t.Fatalf("minted capability %q has a bad form", capability)
			}
			rec, ok, err := s.ByCapability(ctx, state.SumCapability(capability))
			if err != nil {
				t.Fatal(err)
			}
			return rec.SandboxID, ok
		}
		if _, ok, err := s.Capability(ctx, "a"); ok || err != nil {
			t.Fatalf("minted for a missing record: %v %v", ok, err)
		}
		_ = s.PutActive(ctx, rec("a", "i1"), t0)
		_ = s.PutActive(ctx, rec("b", "i1"), t0)
		c1, ok, err := s.Capability(ctx, "a")
		if !ok || err != nil {
			t.Fatalf("mint: %v %v", ok, err)
		}
		if again, _, _ := s.Capability(ctx, "a"); again != c1 {
			t.Fatal("a second hand-out minted another capability")
		}
		cb, _, _ := s.Capability(ctx, "b")
		if cb == c1 {
			t.Fatal("two sandboxes share a capability")
		}
		if sid, ok := opens(c1); !ok || sid != "a" {
			t.Fatalf("capability opens %q %v, want a", sid, ok)
		}
		// Guessed and truncated capabilities open nothing.
		if _, ok := opens(c1[:state.CapabilityLen-1] + "A"); ok && c1[state.CapabilityLen-1] != 'A' {
			t.Fatal("a guessed capability opened a sandbox")
		}
		if state.ValidCapability(c1[:state.CapabilityLen-1]) || state.ValidCapability(c1+"A") || state.ValidCapability(c1[:state.CapabilityLen-1]+"/") {
			t.Fatal("malformed capabilities pass the format check")
		}
		// Re-recording the same incarnation (an adoption) keeps it; a new incarnation revokes it.
		_ = s.PutActive(ctx, rec("a", "i1"), t0)
		if _, ok := opens(c1); !ok {
			t.Fatal("same incarnation lost its capability")
		}
		_ = s.PutActive(ctx, rec("a", "i2"), t0)
		if _, ok := opens(c1); ok {
			t.Fatal("old incarnation's capability opens the new incarnation")
		}
		if n := capKeys(t, s); n != 1 {
			t.Fatalf("%d index entries, want 1 (b's)", n)
		}
		c2, _, _ := s.Capability(ctx, "a")
		if c2 == c1 {
			t.Fatal("new incarnation got the old capability")
		}
		// A stale index entry (a record replaced behind the scripts' back)
		// opens nothing: the record's own capability must match.
		if err := s.Client().Set(ctx, s.Keys().Cap(state.SumCapability(c1).Hex()), "a", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, ok := opens(c1); ok {
			t.Fatal("a stale index entry opened a record holding another capability")
		}
		_ = s.Client().Del(ctx, s.Keys().Cap(state.SumCapability(c1).Hex()))
		// Claiming revokes at once; forgetting removes the index entry.
		if _, ok, _ := s.Claim(ctx, "a", ""); !ok {
			t.Fatal("claim failed")
		}
		if _, ok := opens(c2); ok {
			t.Fatal("claimed sandbox still opens")
		}
		if _, ok, _ := s.Capability(ctx, "a"); ok {
			t.Fatal("minted for a sandbox being destroyed")
		}
		_, _ = s.Forget(ctx, "a", "i2")
		_, _ = s.Forget(ctx, "b", "i1")
		if n := capKeys(t, s); n != 0 {
			t.Fatalf("%d index entries left after forget", n)
		}
		if _, ok := opens(cb); ok {
			t.Fatal("forgotten sandbox still opens")
		}
	})
}

func TestReleaseAndAliasesAreIdentityBound(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		_ = s.PutActive(ctx, rec("a", "i1"), time.UnixMilli(1))
		if _, err := s.Release(ctx, "a", "mallory", "t-a", time.UnixMilli(2)); !errors.Is(err, state.ErrIdentity) {
			t.Fatalf("release by another user: %v", err)
		}
		if _, err := s.Release(ctx, "a", "u", "other", time.UnixMilli(2)); !errors.Is(err, state.ErrIdentity) {
			t.Fatalf("release of another thread: %v", err)
		}
		if got, _, _ := s.Get(ctx, "a"); got.State != state.StateActive {
			t.Fatalf("refused release changed the state to %q", got.State)
		}
		// One alias name, two users: two entries, neither visible to the other.
		_ = s.SetAlias(ctx, "alice", "box", "aaaa")
		_ = s.SetAlias(ctx, "bob", "box", "bbbb")
		for user, want := range map[string]string{"alice": "aaaa", "bob": "bbbb"} {
			if sid, ok, _ := s.Alias(ctx, user, "box"); !ok || sid != want {
				t.Fatalf("%s's alias = %q %v", user, sid, ok)
			}
			if m, _ := s.AliasesBySandbox(ctx, user); len(m) != 1 || m[want] != "box" {
				t.Fatalf("%s's aliases = %v", user, m)
			}
		}
		if m, _ := s.AliasesBySandbox(ctx, ""); len(m) != 2 || m["aaaa"] != "box" || m["bbbb"] != "box" {
			t.Fatalf("every user's aliases (an admin's list) = %v", m)
		}
		if _, ok, _ := s.Alias(ctx, "carol", "box"); ok {
			t.Fatal("carol resolves another user's alias")
		}
		_ = s.DeleteAlias(ctx, "bob", "box")
		if _, ok, _ := s.Alias(ctx, "alice", "box"); !ok {
			t.Fatal("bob's delete removed alice's alias")
		}
	})
}

// capKeys counts the capability index entries.
func capKeys(t *testing.T, s *Store) int {
	t.Helper()
	keys, err := s.scan(context.Background(), s.Keys().Cap("*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}
