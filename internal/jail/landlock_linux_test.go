package jail

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
)

func init() { testScenarios["signal-domains"] = runSignalDomains }

// The sandbox server forks and signals its commands from one OS thread
// (package sandbox, procthread.go) because of what this pins down: after
// restrictFilesystem each thread is in a Landlock domain of its own, and
// with signals scoped a child forked by one thread can be signalled by that
// thread but not by another (EPERM). Should Landlock ever restrict all
// threads into one domain, the cross-thread line changes and the one
// thread is no longer needed.
func TestScopedSignalsFollowTheForkingThread(t *testing.T) {
	t.Parallel()
	if landlockABI() < 6 { // ABI 6 brought signal scoping
		t.Skipf("Landlock ABI %d scopes no signals", landlockABI())
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), scenarioEnv+"=signal-domains")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scenario: %v\n%s", err, out)
	}
	want := "same thread: <nil>\nother thread: " + syscall.EPERM.Error() + "\n"
	if string(out) != want {
		t.Errorf("signals to a child after restrictFilesystem:\n%s\nwant\n%s", out, want)
	}
}

// lockedThread runs the functions sent to it on one OS thread of its own.
func lockedThread() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
}

// on runs f on thread th and waits for it.
func on(th chan<- func(), f func()) {
	done := make(chan struct{})
	th <- func() { f(); close(done) }
	<-done
}

// runSignalDomains restricts this process as lockDown does, with threads
// already running (as the Go runtime has them in the sandbox's init), forks
// a sleep from one of them and probes it (signal 0) from that thread and
// from another.
func runSignalDomains() int {
	before, other := lockedThread(), lockedThread()
	if err := restrictFilesystem([]string{os.TempDir()}); err != nil {
		fmt.Println(err)
		return 1
	}
	sleep := exec.Command("sleep", "60")
	var err error
	on(before, func() { err = sleep.Start() })
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer func() { on(before, func() { _ = sleep.Process.Kill() }); _ = sleep.Wait() }()
	for _, th := range []struct {
		name string
		th   chan<- func()
	}{{"same thread", before}, {"other thread", other}} {
		on(th.th, func() { err = syscall.Kill(sleep.Process.Pid, 0) })
		fmt.Printf("%s: %v\n", th.name, err)
	}
	return 0
}
