package sandbox

import (
	"os/exec"
	"sync"
)

// The server's own children (the shells it starts) are reaped by their
// exec.Cmd.Wait. In the process backend's jail the server is PID 1 of its
// PID namespace, so it also inherits every orphan (a `sleep &` whose shell
// has exited) and must reap those, without ever taking the exit status of a
// child a Wait is still owed (reaper_linux.go).
var (
	// spawning is held (read) across Start and the registration of the pid,
	// and (write) by the reaper while it picks orphans: it never sees a
	// child of ours that is not registered yet.
	spawning sync.RWMutex
	ownMu    sync.Mutex
	own      = map[int]struct{}{}
)

// startOwned starts cmd (startLimited) and registers it as a child whose
// Wait is owed.
func startOwned(cmd *exec.Cmd) error {
	spawning.RLock()
	defer spawning.RUnlock()
	if err := startLimited(cmd); err != nil {
		return err
	}
	ownMu.Lock()
	own[cmd.Process.Pid] = struct{}{}
	ownMu.Unlock()
	return nil
}

// waitOwned waits for a child started by startOwned.
func waitOwned(cmd *exec.Cmd) error {
	err := cmd.Wait()
	ownMu.Lock()
	delete(own, cmd.Process.Pid)
	ownMu.Unlock()
	return err
}

func owned(pid int) bool {
	ownMu.Lock()
	defer ownMu.Unlock()
	_, ok := own[pid]
	return ok
}
