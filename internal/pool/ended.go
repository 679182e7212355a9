package pool

import "sync"

// maxEnded bounds endedSet: an entry is cleared by the sandbox's next
// acquire, and one never acquired again would stay; past the bound the set
// starts over, which costs only the liveness check it would have asked for.
const maxEnded = 4096

// endedSet remembers incarnations the backend reported ended
// (backend.IncarnationWatcher) until the next acquire of their sandbox,
// which then checks liveness before it trusts a Redis record that may still
// name the ended incarnation (the record is fixed by whoever recreates it).
type endedSet struct {
	mu sync.Mutex
	m  map[string]string // sandbox id → ended incarnation
}

func (s *endedSet) add(sid, incarnation string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxEnded {
		s.m = make(map[string]string)
	}
	s.m[sid] = incarnation
}

// take reports whether incarnation of sid was reported ended, and forgets
// whatever was reported for sid.
func (s *endedSet) take(sid, incarnation string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.m[sid]
	delete(s.m, sid)
	return ok && got == incarnation
}

// incarnationEnded is the pool's backend.IncarnationWatcher callback: the
// route to it leaves the cache at once, and the next acquire verifies.
func (p *Pool) incarnationEnded(sid, incarnation string) {
	p.cache.dropIncarnation(sid, incarnation)
	p.ended.add(sid, incarnation)
}
