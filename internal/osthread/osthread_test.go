package osthread

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every call runs on the same thread, whichever goroutine calls.
func TestDoRunsOnOneThread(t *testing.T) {
	t.Parallel()
	var first int
	Do(func() { first = unix.Gettid() })
	got := make(chan int, 8)
	for range 8 {
		go func() {
			runtime.LockOSThread() // the caller's own thread is another
			defer runtime.UnlockOSThread()
			Do(func() { got <- unix.Gettid() })
		}()
	}
	for range 8 {
		if tid := <-got; tid != first {
			t.Fatalf("ran on thread %d, then %d", first, tid)
		}
	}
}

// A child with a parent-death signal started through Do outlives the
// thread of the goroutine that asked for it; started on that thread, it
// dies with it (the control, which is how a shared kube-apiserver was
// killed when another test's goroutine exited while locked to its thread).
func TestDeathSignalOutlivesTheCallersThread(t *testing.T) {
	t.Parallel()
	start := func(tied bool) *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		started := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // exits locked: the runtime retires this thread
			if tied {
				Do(func() { started <- cmd.Start() })
			} else {
				started <- cmd.Start()
			}
		}()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	tied, control := start(true), start(false)
	exited := make(chan struct{})
	go func() { _ = control.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("control: a child started on a retired thread kept running; the test shows nothing")
	}
	time.Sleep(200 * time.Millisecond)
	if err := tied.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child started through Do died with the caller's thread: %v", err)
	}
}
