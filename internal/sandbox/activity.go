package sandbox

import "net/http"

// activity is what GET /v1/sandgate/activity answers: the gateway's
// freezer asks it before it stops an idle sandbox's processes, and a
// checkpoint restore before it swaps the files under them. Requests counts
// the server's requests in flight besides this one: an open WebSocket
// terminal, an SSE stream, a command being waited for.
type activity struct {
	Commands int   `json:"commands"`
	Requests int64 `json:"requests"`
}

func (s *Server) handleActivity(w http.ResponseWriter, _ *http.Request) error {
	s.groups.mu.Lock()
	n := len(s.groups.m)
	s.groups.mu.Unlock()
	ok(w, "ok", activity{Commands: n, Requests: s.inflight.Load() - 1})
	return nil
}
