package sandbox

import (
	"fmt"
	"syscall"

	"github.com/sandgate/sandgate/internal/osthread"
)

// Every command is started, and every signal sent, on osthread's one OS
// thread. In the process backend's jail the server's threads are in
// Landlock domains of their own: go-landlock restricts each thread with its
// own landlock_restrict_self call, and each call makes a new domain. With
// signals scoped (LANDLOCK_SCOPE_SIGNAL) a thread may signal only processes
// of its own domain or one nested in it, and a child is in the domain of the
// thread that forked it; so a signal from any thread but the forking one
// fails with EPERM and the command runs on. Forking and signalling from the
// same thread keeps the two in one domain whatever Landlock does.

// signalGroup sends sig to process group pgid from the thread every
// command is forked from.
func signalGroup(pgid int, sig syscall.Signal) error {
	var err error
	osthread.Do(func() { err = syscall.Kill(-pgid, sig) })
	if err != nil {
		return fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return nil
}
