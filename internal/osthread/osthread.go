// Package osthread runs functions on one OS thread that lives as long as
// the process. Some kernel state belongs to the thread, not the process:
// a child's parent-death signal (PR_SET_PDEATHSIG) fires when the thread
// that forked it exits, and a Landlock domain is made per thread. The Go
// runtime moves goroutines between threads and retires a thread whose
// goroutine exits while locked to it, so such work must not run on
// whichever thread a goroutine happens to be on.
package osthread

import (
	"os/exec"
	"runtime"
	"sync"
)

var thread = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays this goroutine's
		for f := range ch {
			f()
		}
	}()
	return ch
})

// Do runs f on the process's one dedicated thread and returns once f has
// returned. Calls are serialised.
func Do(f func()) {
	done := make(chan struct{})
	thread() <- func() {
		defer close(done)
		f()
	}
	<-done
}

// Start starts cmd (its fork and exec) on the dedicated thread: a child
// whose parent-death signal is set then lives until the process ends, not
// until the runtime retires the thread that happened to fork it.
func Start(cmd *exec.Cmd) error {
	var err error
	Do(func() { err = cmd.Start() })
	return err
}
