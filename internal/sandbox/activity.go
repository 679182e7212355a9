package sandbox

import (
	"net/http"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// procRoot is where process groups are looked up.
const procRoot = "/proc"

// handleActivity answers sandboxspec.ActivityPath (see sandboxspec.Activity):
// the busy commands are the running ones neither stopped nor stalled (see
// progress), with the gateway's sandboxspec.BusyIdleAfterParam.
func (s *Server) handleActivity(w http.ResponseWriter, r *http.Request) error {
	idleAfter := sandboxspec.DefaultBusyIdleAfter
	if v := r.URL.Query().Get(sandboxspec.BusyIdleAfterParam); v != "" {
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
	a := sandboxspec.Activity{Requests: s.inflight.Load()}
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

// shift moves the last progress d later: the command was frozen that long
// (handleThaw), which is no idleness of its own.
func (p *progress) shift(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen {
		p.at = p.at.Add(d)
	}
}
