package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// sampler watches the sandbox processes in /proc through the whole run:
// two live processes for one thread at the same instant is a duplicate, and
// every process that disappears is noted, to be matched later against the
// client destroys and injected kills that explain it.
type sampler struct {
	bin, dataDir string

	mu         sync.Mutex
	samples    int
	maxLive    int
	live       int
	duplicates []duplicate
	dupKeys    map[string]bool      // a lasting duplicate is counted once
	seen       map[string]*seenProc // by incarnation
	gone       []*seenProc
	errs       int
}

type seenProc struct {
	proc     sandboxProc
	lastSeen time.Time
	goneBy   time.Time // first sample without it
}

func (g *seenProc) String() string {
	return fmt.Sprintf("thread %s pid %d vanished: last seen %s, gone by %s", g.proc.thread, g.proc.pid,
		g.lastSeen.Format("15:04:05.000"), g.goneBy.Format("15:04:05.000"))
}

type duplicate struct {
	at     time.Time
	thread string
	procs  []sandboxProc
}

func (d duplicate) String() string {
	return fmt.Sprintf("%s: thread %s had %d live sandbox processes %v", d.at.Format(time.TimeOnly), d.thread, len(d.procs), d.procs)
}

func (d duplicate) key() string {
	incs := make([]string, 0, len(d.procs))
	for _, p := range d.procs {
		incs = append(incs, p.incarnation())
	}
	slices.Sort(incs)
	return strings.Join(incs, ",")
}

func newSampler(bin, dataDir string) *sampler {
	return &sampler{bin: bin, dataDir: dataDir, seen: map[string]*seenProc{}, dupKeys: map[string]bool{}}
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample takes one look at /proc. On a loaded machine a scan takes a
// second or more: a process it finds was alive at some instant between
// began and now, so began is what it counts as last seen (a destroy that
// ended after began explains its disappearance), and now is when a process
// it misses is gone by.
func (s *sampler) sample() {
	began := time.Now()
	procs, err := scanSandboxes(s.bin, s.dataDir)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
		return
	}
	s.samples++
	s.live = len(procs)
	s.maxLive = max(s.maxLive, len(procs))
	present := map[string]bool{}
	byThread := map[string][]sandboxProc{}
	for _, p := range procs {
		inc := p.incarnation()
		present[inc] = true
		byThread[p.thread] = append(byThread[p.thread], p)
		if sp := s.seen[inc]; sp != nil {
			sp.lastSeen = began
		} else {
			s.seen[inc] = &seenProc{proc: p, lastSeen: began}
		}
	}
	for inc, sp := range s.seen {
		if !present[inc] {
			sp.goneBy = now
			s.gone = append(s.gone, sp)
			delete(s.seen, inc)
		}
	}
	for thread, ps := range byThread {
		if d, ok := confirmDuplicate(s.bin, s.dataDir, thread, ps, now); ok && !s.dupKeys[d.key()] {
			s.dupKeys[d.key()] = true
			s.duplicates = append(s.duplicates, d)
		}
	}
}

// confirmDuplicate re-checks two or more processes seen for one thread. The
// scan reads /proc one process at a time, so an old one seen early and its
// replacement seen later need not have lived together; but if every one of
// them still runs after the scan, all were alive at the instant the first
// re-check passed: a real duplicate.
func confirmDuplicate(bin, dataDir, thread string, ps []sandboxProc, now time.Time) (duplicate, bool) {
	if len(ps) < 2 {
		return duplicate{}, false
	}
	var alive []sandboxProc
	for _, p := range ps {
		if stillRuns(p, bin, dataDir) {
			alive = append(alive, p)
		}
	}
	if len(alive) < 2 {
		return duplicate{}, false
	}
	return duplicate{at: now, thread: thread, procs: alive}, true
}

// snapshot is what progress prints.
func (s *sampler) snapshot() (samples, live, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.live, len(s.duplicates)
}
