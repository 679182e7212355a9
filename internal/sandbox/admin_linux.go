package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/sandgate/sandgate/internal/proctree"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// self is the server's own process (pid and start time), once /proc is
// known to be its PID namespace's: a server that is PID 1 of a namespace
// but reads its launcher's /proc would take the host's processes for its
// sandbox's.
func self() (proctree.Proc, error) {
	pid := os.Getpid()
	if link, err := os.Readlink("/proc/self"); err != nil || link != strconv.Itoa(pid) {
		return proctree.Proc{}, errors.New("/proc is not the server's PID namespace's: it cannot tell its sandbox's processes")
	}
	p, found, err := proctree.Read(pid)
	if err == nil && !found {
		err = errors.New("the server's own process is not in /proc")
	}
	return p, err
}

// sandboxProcs lists the sandbox's live processes other than the server.
// As PID 1 of its PID namespace (a container: Kubernetes, docker) the
// server's sandbox is every process in it, so a command that daemonised
// or was reparented to it is found too. Otherwise (the process backend
// with isolation none, a test, a server run by hand) /proc shows the
// host's processes, and the sandbox is only the server's descendants,
// walked from its own pid: a process that left the tree is no longer
// reached, as the backend's Destroy does not reach it either.
func sandboxProcs(me proctree.Proc) ([]proctree.Proc, error) {
	var procs []proctree.Proc
	var err error
	if me.PID == 1 {
		procs, err = proctree.All()
	} else {
		procs, err = proctree.Tree(me.PID, me.Start)
	}
	out := procs[:0]
	for _, p := range procs {
		if p.PID != me.PID && !p.Dead {
			out = append(out, p)
		}
	}
	return out, err
}

// freezeSandbox stops every process of the sandbox but the server (and
// those already stopped, which a thaw then leaves so), returning once
// all of them are stopped.
func freezeSandbox(ctx context.Context) (proctree.Set, error) {
	me, err := self()
	if err != nil {
		return nil, err
	}
	return proctree.Stop(ctx, func() ([]proctree.Proc, error) {
		procs, err := sandboxProcs(me)
		running := procs[:0]
		for _, p := range procs {
			if !p.Stopped {
				running = append(running, p)
			}
		}
		return running, err
	})
}

func thawSandbox(set proctree.Set) error { return proctree.Continue(set) }

// measure is the sandbox's resource use: its cgroup's, when the server
// has one of its own (ownCgroup), else the sum over its processes.
func (s *Server) measure() (sandboxspec.Stats, error) {
	me, err := self()
	if err != nil {
		return sandboxspec.Stats{}, err
	}
	if st, ok := s.cgroupStats(me); ok {
		return st, nil
	}
	procs, err := sandboxProcs(me)
	if err != nil {
		return sandboxspec.Stats{}, fmt.Errorf("list the sandbox's processes: %w", err)
	}
	return procStats(append(procs, me)), nil
}

// procStats sums what /proc says of procs: CPU time their own and that of
// the children they reaped (so a command that ended still counts, its
// time now its parent's), and resident memory.
func procStats(procs []proctree.Proc) sandboxspec.Stats {
	st := sandboxspec.Stats{PIDs: len(procs), Source: sandboxspec.StatsProc}
	var ticks uint64
	for _, p := range procs {
		ticks += p.CPUTicks + p.ChildTicks
		st.MemoryBytes += p.RSSPages * int64(os.Getpagesize())
	}
	st.CPUSeconds = float64(ticks) / proctree.ClockTicks
	return st
}
