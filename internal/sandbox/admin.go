package sandbox

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/proctree"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The Sandgate-private freezer and statistics of the sandbox server
// (sandboxspec.FreezePath, ThawPath, StatsPath), for a backend with no
// cgroup freezer or container statistics of its own: which processes are
// the sandbox's is sandboxProcs' answer (admin_linux.go).

// freezeWait bounds a freeze or a thaw whose request does not end sooner:
// a freeze takes milliseconds.
const freezeWait = 10 * time.Second

// errNoAdmin: off Linux the server reads no /proc, so it can neither
// freeze nor measure its sandbox.
var errNoAdmin = errors.New("not supported on this platform")

// freezer is what a freeze holds stopped, so that the thaw continues
// exactly that: never a process the tenant stopped itself, nor one that
// took a freed pid since.
type freezer struct {
	mu  sync.Mutex // one freeze or thaw at a time; no other request waits on it
	set proctree.Set
	at  time.Time // when the first freeze of the set stopped it
}

// handleFreeze answers sandboxspec.FreezePath.
func (s *Server) handleFreeze(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), freezeWait)
	defer cancel()
	s.frozen.mu.Lock()
	defer s.frozen.mu.Unlock()
	set, err := freezeSandbox(ctx)
	if err != nil {
		return adminErr("freeze", err)
	}
	if len(s.frozen.set) == 0 {
		s.frozen.set, s.frozen.at = proctree.Set{}, time.Now()
	}
	for pid, start := range set {
		s.frozen.set[pid] = start
	}
	s.log.InfoContext(ctx, "sandbox frozen", "processes", len(s.frozen.set), "new", len(set))
	ok(w, "frozen", sandboxspec.Freeze{Frozen: true, Processes: len(s.frozen.set)})
	return nil
}

// handleThaw answers sandboxspec.ThawPath. The time the commands spent
// frozen is no idle time of theirs (see progress).
func (s *Server) handleThaw(w http.ResponseWriter, r *http.Request) error {
	s.frozen.mu.Lock()
	defer s.frozen.mu.Unlock()
	n := len(s.frozen.set)
	if n > 0 {
		if err := thawSandbox(s.frozen.set); err != nil {
			return adminErr("thaw", err)
		}
		frozenFor := time.Since(s.frozen.at)
		s.groups.mu.Lock()
		for _, c := range s.groups.m {
			c.prog.shift(frozenFor)
		}
		s.groups.mu.Unlock()
		s.frozen.set = nil
		s.log.InfoContext(r.Context(), "sandbox thawed", "processes", n)
	}
	ok(w, "thawed", sandboxspec.Freeze{Processes: n})
	return nil
}

// handleStats answers sandboxspec.StatsPath.
func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) error {
	st, err := s.measure()
	if err != nil {
		return adminErr("stats", err)
	}
	ok(w, "ok", st)
	return nil
}

// adminErr is 501 off Linux and 500 otherwise; the message names no path
// (pids and errno only).
func adminErr(what string, err error) error {
	status := http.StatusInternalServerError
	if errors.Is(err, errNoAdmin) {
		status = http.StatusNotImplemented
	}
	return &apiError{status: status, msg: what + ": " + err.Error(), err: err}
}
