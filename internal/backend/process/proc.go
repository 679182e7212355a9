package process

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/proctree"
)

// proc is one host process as far as the backend cares: identity (pid plus
// start time, so a recycled pid is told apart), tree and group membership.
type proc = proctree.Proc

// Destroy gives the sandbox server this long after SIGTERM to stop its
// sessions before the group is killed.
const termGrace = 2 * time.Second

// incarnation is "<pid>-<start time>".
func incarnation(pid int, start string) string { return strconv.Itoa(pid) + "-" + start }

func parseIncarnation(s string) (int, string, error) {
	p, start, ok := strings.Cut(s, "-")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 1 || start == "" {
		return 0, "", fmt.Errorf("malformed process incarnation %q", s)
	}
	return pid, start, nil
}

// live reports whether pid runs and is still the process that started at
// start (a pid reused by an unrelated process is not live).
func live(ctx context.Context, pid int, start string) (bool, error) {
	p, found, err := readProc(ctx, pid)
	if err != nil || !found {
		return false, err
	}
	return !p.Dead && p.Start == start, nil
}

// descendants returns the process tree under root (excluding root), with
// start times, taken before anything is signalled: once the root dies its
// children are reparented and the tree can no longer be found.
func descendants(ctx context.Context, root int) ([]proc, error) {
	all, err := allProcs(ctx)
	if err != nil {
		return nil, err
	}
	tree := proctree.Descendants(all, root)
	out := tree[:0]
	for _, c := range tree {
		if c.Start == "" { // ps-based listing: look the start time up
			full, found, err := readProc(ctx, c.PID)
			if err != nil || !found {
				continue
			}
			c = full
		}
		out = append(out, c)
	}
	return out, nil
}

// terminate stops the sandbox whose leader is pid (verified live by the
// caller): SIGTERM to its process group, a bounded wait, then SIGKILL to the
// group and to every descendant that left it (shell sessions run in their
// own groups) and still is the process that was seen at the start. It
// returns once all of them are gone: a killed process exits only when it
// is next scheduled (later on a loaded machine, or when it was stopped), and
// a destroyed sandbox leaves nothing running.
func terminate(ctx context.Context, pid int, start string) error {
	tree, err := descendants(ctx, pid)
	if err != nil {
		return err
	}
	signalBoth(pid, syscall.SIGTERM)
	// Whatever ended the wait (exit, grace over, ctx done), kill next: a
	// cancelled destroy must not leave a half-stopped sandbox behind.
	_ = waitGone(ctx, pid, start, termGrace)
	signalBoth(pid, syscall.SIGKILL)
	killed := tree[:0]
	for _, d := range tree {
		if ok, _ := live(ctx, d.PID, d.Start); !ok {
			continue
		}
		if d.PGID == d.PID {
			signalGroup(d.PID, syscall.SIGKILL)
		}
		_ = syscall.Kill(d.PID, syscall.SIGKILL)
		killed = append(killed, d)
	}
	err = waitGone(ctx, pid, start, termGrace)
	for _, d := range killed {
		if e := waitGone(ctx, d.PID, d.Start, termGrace); err == nil {
			err = e
		}
	}
	return err
}

// signalBoth signals the sandbox's process group and the process itself,
// in case it no longer leads its group.
func signalBoth(pid int, sig syscall.Signal) {
	signalGroup(pid, sig)
	_ = syscall.Kill(pid, sig)
}

// signalGroup signals a process group; a group that is already gone is fine.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// waitGone polls, cheaply and with growing intervals, until the process is
// no longer live or the bound passes.
func waitGone(ctx context.Context, pid int, start string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	interval := time.Millisecond
	for {
		ok, err := live(ctx, pid, start)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("process did not exit")
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for exit: %w", ctx.Err())
		case <-t.C:
		}
		interval = min(interval*2, 50*time.Millisecond)
	}
}
