package sandbox

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestDrainWaitsForOutputAlreadyWritten: a command's last output sits in
// the pipe while its reader has not run yet (a busy machine) and a
// background child keeps the pipe open. The result must wait for that
// output past drainGrace instead of returning without it.
func TestDrainWaitsForOutputAlreadyWritten(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // the background child's copy: never closed during the test
	if _, err := w.WriteString("ok\n"); err != nil {
		t.Fatal(err)
	}
	p := &pipeReader{f: r, wrote: new(atomic.Int64)}
	buf := newOutBuf(1<<10, nil, newSignal())
	returned := make(chan struct{})
	go func() {
		awaitDrain([]*pipeReader{p}, make(chan struct{}))
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("returned while the output was still unread in the pipe")
	case <-time.After(3 * drainGrace):
	}
	go p.copyTo(buf) // the reader finally runs
	select {
	case <-returned:
	case <-time.After(drainMax):
		t.Fatal("still waiting after the output was read")
	}
	buf.flush()
	if got := buf.String(); got != "ok\n" {
		t.Fatalf("output %q, want %q", got, "ok\n")
	}
}

// TestDrainStopsForAnIdlePipeHeldOpen: a background child that holds the
// pipe but writes nothing does not hold the answer beyond the grace.
func TestDrainStopsForAnIdlePipeHeldOpen(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p := &pipeReader{f: r, wrote: new(atomic.Int64)}
	go p.copyTo(newOutBuf(1<<10, nil, newSignal()))
	start := time.Now()
	awaitDrain([]*pipeReader{p}, make(chan struct{}))
	if took := time.Since(start); took >= drainMax {
		t.Fatalf("an idle pipe held open kept the answer for %s (drainMax)", took)
	}
}
