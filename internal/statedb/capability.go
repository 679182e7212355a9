package statedb

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// A capability is the credential of a capability URL ({public_url}/c/{cap}):
// whoever holds it reaches one sandbox incarnation, nothing else, with no
// other credential. It is 32 random bytes (never derived from the sandbox
// id), kept in the sandbox's record so that every replica can hand the same
// URL out again, and indexed by its SHA-256 so that a look-up never compares
// the secret itself. A new incarnation starts without one; claiming a
// sandbox for destruction revokes it, and forgetting the record removes it.

func newCapability() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mint capability: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// scriptMintCapability returns the capability of the incarnation sid's
// record names now, minting it on first use: the candidate (and its SHA-256,
// for the index) is written only if the record exists, is not being
// destroyed and has none yet. Replicas racing on the first hand-out all get
// the one that won. It binds to whichever incarnation the record holds at
// that instant: a replacement (PutActive) drops it atomically, so it can
// never outlive the incarnation it was written into.
// KEYS: sbx. ARGV: candidate, sha256hex(candidate).
// Returns {capability, sum}, or nil when the record is gone or being destroyed.
var scriptMintCapability = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'cap', 'cap_sum')
if not st[1] or st[1] == 'destroying' then return nil end
if st[2] then return {st[2], st[3]} end
redis.call('HSET', KEYS[1], 'cap', ARGV[1], 'cap_sum', ARGV[2])
return {ARGV[1], ARGV[2]}
`)

// Capability returns the capability of sid's current incarnation, minting
// it if it has none; ok is false when there is no record or it is being
// destroyed. Steps: (1) the record holds it; (2) its index entry is set,
// on every hand-out, so one a crash left unwritten is written by the next.
// An index entry outliving its capability (a crash in a replacement or a
// forget) opens nothing: ByCapability checks the record.
func (s *Store) Capability(ctx context.Context, sid string) (string, bool, error) {
	candidate, err := newCapability()
	if err != nil {
		return "", false, err
	}
	sum := state.SumCapability(candidate)
	res, err := scriptMintCapability.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, candidate, sum.Hex()).StringSlice()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("mint capability: %w", err)
	}
	if err := s.rdb.Set(ctx, s.keys.Cap(res[1]), sid, 0).Err(); err != nil {
		return "", false, fmt.Errorf("index capability: %w", err)
	}
	return res[0], true, nil
}

// ByCapability returns the record a capability opens: ok is false when the
// capability is unknown or revoked, or the record is being destroyed. The
// record's own hash is compared in constant time, so a stale index entry
// can never open a record that holds another capability.
func (s *Store) ByCapability(ctx context.Context, sum state.CapabilitySum) (state.Record, bool, error) {
	sid, err := s.rdb.Get(ctx, s.keys.Cap(sum.Hex())).Result()
	if errors.Is(err, redis.Nil) {
		return state.Record{}, false, nil
	}
	if err != nil {
		return state.Record{}, false, fmt.Errorf("read capability index: %w", err)
	}
	rec, ok, err := s.Get(ctx, sid)
	if err != nil || !ok || rec.State == state.StateDestroying {
		return state.Record{}, false, err
	}
	want := state.SumCapability(rec.Capability)
	if rec.Capability == "" || subtle.ConstantTimeCompare(want[:], sum[:]) != 1 {
		return state.Record{}, false, nil
	}
	return rec, true, nil
}
