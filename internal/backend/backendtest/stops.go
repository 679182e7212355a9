package backendtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// Stop is one way of stopping a command through the sandbox API, and the
// answer it must give: pass the ones a backend's sandbox can run to
// StopsReachCommands.
type Stop struct {
	name string
	// limit bounds the stopping calls; the command must be gone within
	// goneAfter after they answered.
	limit  time.Duration
	status string
	code   int
	stop   func(t testing.TB, info backend.Info, marker string) (ended, error)
}

// The ways of stopping a command. SIGKILL ends with 137, bash/kill's
// default SIGTERM with 143. The limits leave room for a loaded machine (the
// suite runs packages side by side under -race, and one run is 10 workers
// beside two CPU hogs): on an idle one a stop answers in milliseconds. A
// stop that does not work lasts the sleep's full 10 s (or 5 s, where
// shell/kill gives up waiting), which they still catch.
var (
	ShellKill   = Stop{"shell kill", 4 * time.Second, "terminated", 137, shellKill}
	BashKill    = Stop{"bash kill", 4 * time.Second, "killed", 143, bashKill}
	HardTimeout = Stop{"hard_timeout 1", 5 * time.Second, "hard_timeout", 137, hardTimeout}
	// CodeTimeout runs Python: only for sandboxes that have it.
	CodeTimeout = Stop{"code timeout 1", 5 * time.Second, "timeout", 137, codeTimeout}
)

// goneAfter is how soon after a stop answered no process of its command
// may be left.
const goneAfter = 2 * time.Second

// ended is how an API answered about a command it stopped, and how long
// the stopping calls took.
type ended struct {
	status string
	code   *int
	took   time.Duration
}

// StopsReachCommands checks that every one of stops ends a command in the
// sandbox, every time (200 runs each with CI=true, 40 with -short). Each
// run starts a command whose sleep has a unique length (the marker), stops
// it, and checks inside the sandbox that no process with the marker is
// left within goneAfter, and that the answer says how the command ended.
// Two CPU hogs in the sandbox keep the server's threads busy, so its
// goroutines move between them as in use.
func StopsReachCommands(t *testing.T, info backend.Info, stops ...Stop) {
	t.Helper()
	runs := 200
	if testing.Short() && os.Getenv("CI") != "true" {
		runs = 40
	}
	hogs, err := shellSession(t, info, "hogs")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Call(t, info, "/v1/shell/exec", map[string]any{
			"id": hogs, "command": "while :; do :; done", "async_mode": true, "hard_timeout": 120}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range stops {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var took []time.Duration
			defer func() { // the spread, for the record (speed is the benchmarks' business)
				slices.Sort(took)
				if n := len(took); n > 0 {
					t.Logf("%d stops: p50 %v, p99 %v, max %v", n, took[n/2], took[n*99/100], took[n-1])
				}
			}()
			inParallel(t, runs, 10, func(run int) error {
				// The sleep ends by itself after 10 s: a stop that does
				// not work fails the run then rather than hanging it.
				marker := fmt.Sprintf("10.%d%04d", i+1, run)
				got, err := tc.stop(t, info, marker)
				if err != nil {
					return err
				}
				mu.Lock()
				took = append(took, got.took)
				mu.Unlock()
				if got.took > tc.limit {
					return fmt.Errorf("%s: stopping took %v, want at most %v", marker, got.took, tc.limit)
				}
				if got.status != tc.status || got.code == nil || *got.code != tc.code {
					return fmt.Errorf("%s answered status %q exit code %v, want %q %d",
						marker, got.status, fmtCode(got.code), tc.status, tc.code)
				}
				return goneWithin(t, info, marker, goneAfter)
			})
		})
	}
}

// inParallel calls f for runs 0..runs-1 on workers goroutines, and fails
// the test with the first error, after which no new run starts.
func inParallel(t *testing.T, runs, workers int, f func(run int) error) {
	t.Helper()
	next := make(chan int)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for run := range next {
				if err := f(run); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for run := range runs {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- run
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// sleepCommand runs a sleep whose length is marker, as the shell's own
// process (exec), so the marker is the group leader's command line.
func sleepCommand(marker string) string { return "exec sleep " + marker }

// shellSession creates shell session id: shell/kill ends all the running
// commands of a session, so each kill has one of its own.
func shellSession(t testing.TB, info backend.Info, id string) (string, error) {
	var sess struct {
		SessionID string `json:"session_id"`
	}
	err := Call(t, info, "/v1/shell/sessions/create", map[string]any{"id": id}, &sess)
	return sess.SessionID, err
}

// closeSession closes session id once its run is done, keeping the first
// error in err: the server keeps at most 64 sessions and evicts idle ones
// beyond that, generated ones first, so sessions left behind would evict
// a later run's new session before it ran its command.
func closeSession(t testing.TB, info backend.Info, id string, err *error) {
	if cerr := Call(t, info, "/v1/bash/sessions/"+id+"/close", nil, nil); *err == nil {
		*err = cerr
	}
}

// shellKill starts the sleep with shell/exec async_mode and kills it with
// shell/kill, which answers once the command ended.
func shellKill(t testing.TB, info backend.Info, marker string) (_ ended, err error) {
	id, err := shellSession(t, info, "kill-"+marker)
	if err != nil {
		return ended{}, err
	}
	defer closeSession(t, info, id, &err)
	if err := Call(t, info, "/v1/shell/exec", map[string]any{
		"id": id, "command": sleepCommand(marker), "async_mode": true}, nil); err != nil {
		return ended{}, err
	}
	if err := presentWithin(t, info, marker); err != nil {
		return ended{}, err
	}
	var res struct {
		Status     string `json:"status"`
		Returncode int    `json:"returncode"`
	}
	start := time.Now()
	if err := Call(t, info, "/v1/shell/kill", map[string]any{"id": id}, &res); err != nil {
		return ended{}, err
	}
	return ended{res.Status, &res.Returncode, time.Since(start)}, nil
}

// bashKill starts the sleep in a bash session with async_mode, sends it
// bash/kill's default signal (SIGTERM), and reads how it ended from
// bash/output, which waits for the end.
func bashKill(t testing.TB, info backend.Info, marker string) (_ ended, err error) {
	var sess struct {
		SessionID string `json:"session_id"`
	}
	if err := Call(t, info, "/v1/bash/sessions/create", map[string]any{}, &sess); err != nil {
		return ended{}, err
	}
	defer closeSession(t, info, sess.SessionID, &err)
	if err := Call(t, info, "/v1/bash/exec", map[string]any{
		"session_id": sess.SessionID, "command": sleepCommand(marker), "async_mode": true}, nil); err != nil {
		return ended{}, err
	}
	if err := presentWithin(t, info, marker); err != nil {
		return ended{}, err
	}
	var sent struct {
		Signalled int `json:"signalled"`
	}
	start := time.Now()
	if err := Call(t, info, "/v1/bash/kill", map[string]any{"session_id": sess.SessionID}, &sent); err != nil {
		return ended{}, err
	}
	if sent.Signalled != 1 {
		return ended{}, fmt.Errorf("%s: bash/kill signalled %d commands, want 1", marker, sent.Signalled)
	}
	var out struct {
		Command struct {
			Status   string `json:"status"`
			ExitCode *int   `json:"exit_code"`
		} `json:"command"`
	}
	if err := Call(t, info, "/v1/bash/output", map[string]any{
		"session_id": sess.SessionID, "wait": true, "wait_timeout": 1}, &out); err != nil {
		return ended{}, err
	}
	return ended{out.Command.Status, out.Command.ExitCode, time.Since(start)}, nil
}

// hardTimeout runs the sleep with shell/exec hard_timeout 1 and waits for
// the answer.
func hardTimeout(t testing.TB, info backend.Info, marker string) (ended, error) {
	var res struct {
		Status   string `json:"status"`
		ExitCode *int   `json:"exit_code"`
	}
	start := time.Now()
	err := Call(t, info, "/v1/shell/exec", map[string]any{"command": sleepCommand(marker), "hard_timeout": 1}, &res)
	return ended{res.Status, res.ExitCode, time.Since(start)}, err
}

// codeTimeout runs Python that becomes the sleep with code/execute
// timeout 1.
func codeTimeout(t testing.TB, info backend.Info, marker string) (ended, error) {
	var res struct {
		Status   string `json:"status"`
		ExitCode *int   `json:"exit_code"`
	}
	code := fmt.Sprintf("import os; os.execvp('sleep', ['sleep', '%s'])", marker)
	start := time.Now()
	err := Call(t, info, "/v1/code/execute", map[string]any{"language": "python", "code": code, "timeout": 1}, &res)
	return ended{res.Status, res.ExitCode, time.Since(start)}, err
}

// withMarker counts the sandbox's processes whose command line has marker
// as an argument, reading /proc inside the sandbox. The pattern brackets
// the dot, so the counting command's own arguments do not match.
func withMarker(t testing.TB, info backend.Info, marker string) (int, error) {
	var res struct {
		Output string `json:"output"`
		Status string `json:"status"`
	}
	pattern := strings.Replace(marker, ".", "[.]", 1)
	if err := Call(t, info, "/v1/shell/exec", map[string]any{
		"command": "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -cx '" + pattern + "'"}, &res); err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscan(res.Output, &n); err != nil {
		return 0, fmt.Errorf("count %s: %s %q: %w", marker, res.Status, res.Output, err)
	}
	return n, nil
}

// presentWithin waits (up to 5 s) until the marked sleep runs, so the stop
// that follows has a process to end.
func presentWithin(t testing.TB, info backend.Info, marker string) error {
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := withMarker(t, info, marker)
		if err != nil || n == 1 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never started (%d processes)", marker, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goneWithin checks that no marked process is left after limit.
func goneWithin(t testing.TB, info backend.Info, marker string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		n, err := withMarker(t, info, marker)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still runs %v after it was stopped (%d processes)", marker, limit, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fmtCode(code *int) string {
	if code == nil {
		return "null"
	}
	return fmt.Sprint(*code)
}
