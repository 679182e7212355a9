package sandbox

import (
	"net/http"
	"sync"
	"time"
)

// DefaultBusyIdleAfter is how long a running command may use no CPU and
// write no output before it stops counting as busy, when the gateway does
// not say (query busy_idle_after).
const DefaultBusyIdleAfter = 30 * time.Minute

// procRoot is where process groups are looked up.
const procRoot = "/proc"

// activity is what GET /v1/sandgate/activity answers: the gateway's
// freezer asks it before it stops an idle sandbox's processes, the reaper
// before it destroys one, and a checkpoint restore before it swaps the
// files under them. Commands counts the busy commands: running, not
// stopped, and not stalled (see progress); Stalled the others, which keep
// nothing alive. Requests counts the server's requests in flight besides
// this one: an open WebSocket terminal, an SSE stream, a command being
// waited for.
type activity struct {
	Commands int   `json:"commands"`
	Stalled  int   `json:"stalled"`
	Requests int64 `json:"requests"`
}

// handleActivity answers activity. busy_idle_after (a Go duration; 0 =
// idleness never ends busy, only a stop does) comes from the gateway, so a
// sandbox image need not change for the gateway's setting to apply.
func (s *Server) handleActivity(w http.ResponseWriter, r *http.Request) error {
	idleAfter := DefaultBusyIdleAfter
	if v := r.URL.Query().Get("busy_idle_after"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return statusErr(http.StatusBadRequest, "busy_idle_after: want a non-negative duration such as 30m")
		}
		idleAfter = d
	}
	s.groups.mu.Lock()
	cmds := make([]*command, 0, len(s.groups.m))
	want := make(map[int]bool, len(s.groups.m))
	for pgid, c := range s.groups.m {
		cmds = append(cmds, c)
		want[pgid] = true
	}
	s.groups.mu.Unlock()
	// Unreadable /proc: every command counts as busy (it cannot tell).
	stats, err := scanGroups(procRoot, want)
	now := time.Now()
	a := activity{Requests: s.inflight.Load() - 1}
	for _, c := range cmds {
		if err != nil || c.prog.busy(stats[c.pgid], time.Unix(0, c.wrote.Load()), now, idleAfter) {
			a.Commands++
		} else {
			a.Stalled++
		}
	}
	ok(w, "ok", a)
	return nil
}

// progress is what activity remembers of one command between probes: the
// CPU time its group had used when last looked at, and when it last made
// progress (used CPU or wrote output). A tenant's `kill -STOP $$` or
// `sleep infinity &` would otherwise keep its sandbox from ever being
// frozen or reaped.
type progress struct {
	mu   sync.Mutex
	seen bool
	cpu  uint64
	at   time.Time
}

// busy reports whether the command counts as busy at now, given its
// group's stat and its last output, and records the CPU seen. A group whose
// members are all stopped is not busy. Otherwise it is busy until it has
// used no CPU and written no output for idleAfter (<= 0: forever). The
// first look counts as progress: CPU used before it may be recent.
func (p *progress) busy(g groupStat, wrote, now time.Time, idleAfter time.Duration) bool {
	if g.allStopped() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen || g.cpu != p.cpu {
		p.seen, p.cpu, p.at = true, g.cpu, now
	}
	if wrote.After(p.at) {
		p.at = wrote
	}
	return idleAfter <= 0 || now.Sub(p.at) < idleAfter
}
