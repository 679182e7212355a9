package router

import (
	"fmt"
	"sync"

	"github.com/sandgate/sandgate/internal/auth"
)

// StreamCaps shares a replica's long-lived event streams of one kind (the
// status page's, the provisioning progress streams) between users, so that
// one user holding many open cannot lock everyone else, admins included,
// out. The zero value is the documented default.
type StreamCaps struct {
	// PerUser is how many streams of one kind one non-admin user may hold
	// open on a replica (429 past it). 0 = DefaultStreamsPerUser.
	PerUser int
	// AdminReserve is how many of a kind's streams only admins may take:
	// non-admins together hold at most the total minus this (503 past it),
	// so an operator can always watch. 0 = DefaultAdminStreams.
	AdminReserve int
}

// Defaults of StreamCaps.
const (
	DefaultStreamsPerUser = 8
	DefaultAdminStreams   = 32
)

// MaxStreamsPerKind is the most streams of one kind a replica holds open.
const MaxStreamsPerKind = 256

// Validate names the first bad setting.
func (c StreamCaps) Validate() error {
	u, a := c.effective()
	if u < 0 || u > MaxStreamsPerKind {
		return fmt.Errorf("max_streams_per_user: must be 0 (the default, %d) to %d", DefaultStreamsPerUser, MaxStreamsPerKind)
	}
	if a < 0 || a >= MaxStreamsPerKind {
		return fmt.Errorf("admin_streams: must be 0 (the default, %d) to %d", DefaultAdminStreams, MaxStreamsPerKind-1)
	}
	return nil
}

func (c StreamCaps) effective() (perUser, reserve int) {
	perUser, reserve = c.PerUser, c.AdminReserve
	if perUser == 0 {
		perUser = DefaultStreamsPerUser
	}
	if reserve == 0 {
		reserve = DefaultAdminStreams
	}
	return perUser, reserve
}

// streamCap counts one kind of stream on one replica.
type streamCap struct {
	total, perUser, reserve int
	// full is the kind's error when the replica has no stream left (503).
	full error

	mu     sync.Mutex
	open   int            // everyone's
	users  int            // non-admins'
	byUser map[string]int // non-admins'; entries at 0 are removed
}

// newStreamCap caps a kind of stream at total, shared by caps.
func newStreamCap(total int, caps StreamCaps, full error) *streamCap {
	perUser, reserve := caps.effective()
	return &streamCap{total: total, perUser: perUser, reserve: min(reserve, total), full: full, byUser: map[string]int{}}
}

// acquire takes a stream for p, or says why not; release gives it back and
// must be called exactly once. An admin is bounded by the total only.
func (s *streamCap) acquire(p *auth.Principal) (release func(), err error) {
	admin := p.Has(auth.ScopeAdmin)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.open >= s.total:
		return nil, s.full
	case admin:
		s.open++
		return func() { s.mu.Lock(); s.open--; s.mu.Unlock() }, nil
	case s.byUser[p.User] >= s.perUser:
		return nil, errUserStreams
	case s.users >= s.total-s.reserve:
		return nil, s.full
	}
	s.open++
	s.byUser[p.User]++
	s.users++
	user := p.User
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.open--
		s.users--
		if s.byUser[user]--; s.byUser[user] == 0 {
			delete(s.byUser, user)
		}
	}, nil
}
