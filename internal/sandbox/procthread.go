package sandbox

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// procThread is the one OS thread that starts every command and sends every
// signal to one. In the process backend's jail the server's threads are in
// Landlock domains of their own: go-landlock restricts each thread with its
// own landlock_restrict_self call, and each call makes a new domain. With
// signals scoped (LANDLOCK_SCOPE_SIGNAL) a thread may signal only processes
// of its own domain or one nested in it, and a child is in the domain of the
// thread that forked it; so a signal from any thread but the forking one
// fails with EPERM and the command runs on. Forking and signalling from the
// same locked thread keeps the two in one domain whatever Landlock does.
var procThread = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays this goroutine's
		for f := range ch {
			f()
		}
	}()
	return ch
})

// onProcThread runs f on procThread and returns once it is done.
func onProcThread(f func()) {
	done := make(chan struct{})
	procThread() <- func() {
		defer close(done)
		f()
	}
	<-done
}

// startCmd starts cmd (a fork and an exec) on procThread.
func startCmd(cmd *exec.Cmd) error {
	var err error
	onProcThread(func() { err = cmd.Start() })
	return err
}

// signalGroup sends sig to process group pgid from procThread, the thread
// every command is forked from.
func signalGroup(pgid int, sig syscall.Signal) error {
	var err error
	onProcThread(func() { err = syscall.Kill(-pgid, sig) })
	if err != nil {
		return fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return nil
}
