package preview

import (
	"sync"
	"sync/atomic"
	"time"
)

// Keyring is this replica's copy of the fleet keys (kept in Redis, loaded
// by statedb's watcher at start, on every resubscription and when a
// rotation is announced). Reads are one atomic load and a map read.
type Keyring struct {
	set atomic.Pointer[keySet]
}

type keySet struct {
	current uint16
	keys    map[uint16]*Key
}

// Replace installs the keys that verify (current among them), current
// being the one new links are signed with.
func (r *Keyring) Replace(current uint16, keys map[uint16]*Key) {
	r.set.Store(&keySet{current: current, keys: keys})
}

// Current is the key new links are signed with; ok is false before the
// keys were loaded.
func (r *Keyring) Current() (uint16, *Key, bool) {
	s := r.set.Load()
	if s == nil || s.keys[s.current] == nil {
		return 0, nil, false
	}
	return s.current, s.keys[s.current], true
}

// Key is the key id names, or nil (retired, or not loaded).
func (r *Keyring) Key(id uint16) *Key {
	if s := r.set.Load(); s != nil {
		return s.keys[id]
	}
	return nil
}

// Verify reports whether mac is l's signature for incarnation under a key
// this replica knows.
func (r *Keyring) Verify(l *Link, mac MAC, incarnation string) bool {
	s := r.set.Load()
	if s == nil {
		return false
	}
	k := s.keys[l.KeyID]
	return k != nil && k.verify(l, mac, incarnation)
}

// Revoked is this replica's copy of the fleet's revoked link ids, each
// kept until the link would have expired anyway.
type Revoked struct {
	mu  sync.RWMutex
	ids map[[IDLen]byte]uint32 // id -> the link's expiry (unix seconds)
}

// Has reports whether id was revoked.
func (r *Revoked) Has(id [IDLen]byte) bool {
	r.mu.RLock()
	_, ok := r.ids[id]
	r.mu.RUnlock()
	return ok
}

// Add records a revocation, and forgets the ones whose links expired.
func (r *Revoked) Add(id [IDLen]byte, expires uint32, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = make(map[[IDLen]byte]uint32)
	}
	cut := uint32(now.Unix())
	for k, exp := range r.ids {
		if exp < cut {
			delete(r.ids, k)
		}
	}
	r.ids[id] = expires
}

// Replace installs the whole set, as loaded from Redis.
func (r *Revoked) Replace(ids map[[IDLen]byte]uint32) {
	r.mu.Lock()
	r.ids = ids
	r.mu.Unlock()
}

// Links is what a replica verifies links with.
type Links struct {
	Keys    Keyring
	Revoked Revoked
}

// Check is everything about tok that needs no sandbox: its form, its
// expiry, a known key, not revoked. The caller then looks the sandbox up
// and finishes with Keys.Verify against its incarnation.
func (ls *Links) Check(tok string, now time.Time) (Link, MAC, bool) {
	l, mac, ok := Parse(tok)
	if !ok || int64(l.Expires) <= now.Unix() || l.Port == 0 || ls.Revoked.Has(l.ID) {
		return l, mac, false
	}
	s := ls.Keys.set.Load()
	if s == nil || s.keys[l.KeyID] == nil {
		return l, mac, false
	}
	return l, mac, true
}
