package sandbox

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

func TestSandboxInfo(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	r := ts.do(t, http.MethodGet, "/v1/sandbox", nil)
	if r.Status != http.StatusOK || !r.Success {
		t.Fatalf("GET /v1/sandbox: %d %s", r.Status, r.Body)
	}
	var top sandboxInfo
	_ = json.Unmarshal([]byte(r.Body), &top)
	if top.HomeDir != vWorkspace || top.Workspace != vWorkspace || top.Version == "" || top.Detail.Mode != "host" ||
		top.Detail.System.OS == "" || top.Detail.System.HomeDir != vWorkspace || top.Detail.Runtime == nil || top.Detail.Utils == nil {
		t.Fatalf("sandbox info (the SDKs require detail.system/runtime/utils): %+v", top)
	}
	// AIO 1.9.4's SandboxResponse.data is a string or null: SDK 0.0.31
	// rejects an object there.
	if string(r.Data) != "null" {
		t.Fatalf("data = %s, want null", r.Data)
	}

	container := startServer(t, Config{Env: []string{"HOME=/root", "PATH=/usr/bin:/bin"}})
	r = container.do(t, http.MethodGet, "/v1/sandbox", nil)
	_ = json.Unmarshal([]byte(r.Body), &top)
	if top.HomeDir != "/root" || top.Detail.Mode != "container" {
		t.Fatalf("container mode info: %s", r.Body)
	}
}

func TestShellExecResults(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, tc := range []struct {
		name, cmd, want string
		code            int
	}{
		{"exit code", "echo hi; exit 3", "hi\n", 3},
		{"stderr interleaved", "echo a; echo b >&2; echo c", "a\nb\nc\n", 0},
		{"failing pipeline", "false | true; false", "", 1},
		{"syntax error is a failure, not a wedge", "if then", "syntax error", 2},
		{"virtual paths in, virtual paths out", "cd /mnt/skills && pwd && cat /mnt/skills/SKILL.md", "/mnt/skills\n# skill\n", 0},
		{"default cwd is the workspace", "pwd", vWorkspace + "\n", 0},
		{"signal exit", "kill -9 $$", "", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess := okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{})
			res := shellRun(t, ts, map[string]any{"id": sess.SessionID, "command": tc.cmd})
			if res.Status != statusCompleted || res.ExitCode == nil || *res.ExitCode != tc.code {
				t.Fatalf("status %s exit %v, want completed %d: %+v", res.Status, res.ExitCode, tc.code, res)
			}
			if !strings.Contains(res.Output, tc.want) || tc.want == "" && res.Output != "" && tc.code != 2 {
				t.Fatalf("output %q, want %q", res.Output, tc.want)
			}
			if res.SessionID != sess.SessionID || res.Command != tc.cmd {
				t.Fatalf("session_id/command missing: %+v", res)
			}
		})
	}
}

func TestSessionKeepsCwdAndExports(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	sess := okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": "s1"})
	if sess.SessionID != "s1" || sess.WorkingDir != vWorkspace {
		t.Fatalf("create: %+v", sess)
	}
	shellRun(t, ts, map[string]any{"id": "s1", "command": "mkdir -p a/b && cd a/b && export FOO=bar && BAZ=local"})
	res := shellRun(t, ts, map[string]any{"id": "s1", "command": `pwd; echo "[$FOO][$BAZ]"`})
	if want := vWorkspace + "/a/b\n[bar][]\n"; res.Output != want {
		t.Fatalf("state not carried: %q, want %q", res.Output, want)
	}
	again := okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": "s1"})
	if again.WorkingDir != vWorkspace+"/a/b" {
		t.Fatalf("existing session working_dir = %q", again.WorkingDir)
	}
	// exec_dir overrides the cwd for the call; a killed command leaves the
	// state as it was.
	res = shellRun(t, ts, map[string]any{"id": "s1", "exec_dir": "/mnt/skills", "command": "pwd"})
	if res.Output != "/mnt/skills\n" {
		t.Fatalf("exec_dir: %q", res.Output)
	}
	shellRun(t, ts, map[string]any{"id": "s1", "command": "cd / && export FOO=lost && sleep 5", "hard_timeout": 0.3})
	res = shellRun(t, ts, map[string]any{"id": "s1", "command": "pwd; echo $FOO"})
	if res.Output != "/mnt/skills\nbar\n" {
		t.Fatalf("killed command changed the session: %q", res.Output)
	}
}

func TestBashExec(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	res := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{
		"command": `echo out; echo err >&2; echo "[$API_TOKEN]"; export KEPT=1; exit 4`,
		"env":     map[string]any{"API_TOKEN": "s3cret"},
	})
	if res.Stdout != "out\n[s3cret]\n" || res.Stderr != "err\n" || res.ExitCode == nil || *res.ExitCode != 4 || res.CommandID == "" {
		t.Fatalf("bash exec: %+v", res)
	}
	// Neither env{} nor an export reaches the next bash/exec, even in a
	// session made through the shell API (AIO: "`cd` or `export` inside a
	// command do NOT affect subsequent calls").
	okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": "shared"})
	okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"session_id": "shared",
		"command": `export KEPT=1`, "env": map[string]any{"API_TOKEN": "s3cret"}})
	next := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"session_id": "shared", "command": `echo "[$API_TOKEN][$KEPT]"`})
	if next.Stdout != "[][]\n" {
		t.Fatalf("env{} or export persisted: %q", next.Stdout)
	}

	long := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"command": "printf '%0100d' 0", "max_output_length": 20})
	if !strings.HasPrefix(long.Stdout, "0000000000\n...[output truncated: 80 characters omitted]...\n0000000000") {
		t.Fatalf("max_output_length: %q", long.Stdout)
	}
	killed := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"command": "sleep 10", "hard_timeout": 0.3})
	if killed.Status != "timed_out" || killed.ExitCode == nil {
		t.Fatalf("hard_timeout: %+v", killed)
	}
	waited := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"command": "sleep 0.6; echo done", "timeout": 0.1})
	if waited.Status != statusRunning || waited.ExitCode != nil {
		t.Fatalf("timeout should return running: %+v", waited)
	}
	eventually(t, 5*time.Second, "background completion", func() bool {
		v := okData[shellResult](t, ts, "/v1/shell/view", map[string]any{"id": waited.SessionID})
		return v.Status == statusCompleted && v.Output == "done\n"
	})
}

func TestConcurrentExecsOnOneSession(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"shared", ""} { // "": the default session
		t.Run("id="+id, func(t *testing.T) {
			t.Parallel()
			ts := newHostServer(t)
			if id != "" {
				okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": id})
			}
			var wg sync.WaitGroup
			results := make([]shellResult, 4)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := "sleep 0." + strconv.Itoa(4-i) + "; echo out-" + strconv.Itoa(i) + "; exit " + strconv.Itoa(10+i)
					results[i] = shellRun(t, ts, map[string]any{"id": id, "command": cmd})
				}()
			}
			wg.Wait()
			for i, res := range results {
				if want := "out-" + strconv.Itoa(i) + "\n"; res.Output != want || res.ExitCode == nil || *res.ExitCode != 10+i {
					t.Fatalf("call %d got %q exit %v, want %q exit %d", i, res.Output, res.ExitCode, want, 10+i)
				}
				if res.SessionID != results[0].SessionID {
					t.Fatalf("calls ran in different sessions: %s, %s", res.SessionID, results[0].SessionID)
				}
			}
			if res := shellRun(t, ts, map[string]any{"id": id, "command": "pwd"}); res.Output != vWorkspace+"\n" {
				t.Fatalf("session corrupted: %q", res.Output)
			}
		})
	}
}

// TestDefaultSession: calls without a session id share one session, as in
// the all-in-one sandbox (DeerFlow sends none and expects `cd` to hold).
func TestDefaultSession(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	first := shellRun(t, ts, map[string]any{"command": "cd /mnt/user-data/outputs && export SEEN=yes"})
	next := shellRun(t, ts, map[string]any{"command": `pwd; echo "[$SEEN]"`})
	if first.SessionID == "" || next.SessionID != first.SessionID || next.Output != "/mnt/user-data/outputs\n[yes]\n" {
		t.Fatalf("id-less calls do not share a session: %+v then %+v", first, next)
	}
	byID := shellRun(t, ts, map[string]any{"id": first.SessionID, "command": "pwd"})
	if byID.Output != "/mnt/user-data/outputs\n" {
		t.Fatalf("the default id sees another session: %+v", byID)
	}
	okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": "own"})
	if own := shellRun(t, ts, map[string]any{"id": "own", "command": `pwd; echo "[$SEEN]"`}); own.Output != vWorkspace+"\n[]\n" {
		t.Fatalf("named session shares the default one's state: %q", own.Output)
	}
	// DELETE resets the default session; it comes back fresh, same id.
	if r := ts.do(t, http.MethodDelete, "/v1/shell/sessions/"+first.SessionID, nil); r.Status != http.StatusOK {
		t.Fatalf("delete default session: %s", r.Body)
	}
	fresh := shellRun(t, ts, map[string]any{"command": `pwd; echo "[$SEEN]"`})
	if fresh.SessionID != first.SessionID || fresh.Output != vWorkspace+"\n[]\n" {
		t.Fatalf("after delete: %+v", fresh)
	}
}

// bgPid runs a command that prints a background child's pid, then sleeps.
func bgPid(t *testing.T, output string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(output, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("no pid in output %q", output)
	}
	return pid
}

func TestHardTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"hard_timeout", map[string]any{"hard_timeout": 0.5}},
		{"hard_timeout before timeout", map[string]any{"hard_timeout": 0.5, "timeout": 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.body["command"] = "sleep 300 & echo $!; sleep 300"
			start := time.Now()
			res := shellRun(t, ts, tc.body)
			if res.Status != statusHardTimeout || res.ExitCode == nil || *res.ExitCode != 137 {
				t.Fatalf("want hard_timeout/137: %+v", res)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("hard timeout took %s", d)
			}
			pid := bgPid(t, res.Output)
			eventually(t, 5*time.Second, "background child to die", func() bool { return !alive(pid) })
		})
	}
}

// TestShellExecTimeoutOnlyStopsWaiting: as in the all-in-one sandbox,
// shell/exec `timeout` returns status running and leaves the command be.
func TestShellExecTimeoutOnlyStopsWaiting(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	// The command cannot finish before the test creates the gate, so an
	// answer at all is the timeout; 2s lets "started" out on a loaded machine.
	res := shellRun(t, ts, map[string]any{"command": "echo started; while [ ! -f gate ]; do sleep 0.02; done; echo finished", "timeout": 2})
	if res.Status != statusRunning || res.ExitCode != nil || res.Output != "started\n" {
		t.Fatalf("want running with partial output at the timeout: %+v", res)
	}
	if err := os.WriteFile(filepath.Join(ts.ws, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "command to finish on its own", func() bool {
		v := okData[shellResult](t, ts, "/v1/shell/view", map[string]any{"id": res.SessionID})
		return v.Status == statusCompleted && v.Output == "started\nfinished\n" && v.ExitCode != nil && *v.ExitCode == 0
	})

	res = shellRun(t, ts, map[string]any{"command": "sleep 300 & echo $!; sleep 300", "timeout": 0.3})
	if res.Status != statusRunning {
		t.Fatalf("timeout killed the command: %+v", res)
	}
	pid := bgPid(t, res.Output)
	time.Sleep(300 * time.Millisecond)
	if !alive(pid) {
		t.Fatal("process group killed after timeout")
	}
	okData[killResult](t, ts, "/v1/shell/kill", map[string]any{"id": res.SessionID})
	eventually(t, 5*time.Second, "killed group to die", func() bool { return !alive(pid) })

	if done := shellRun(t, ts, map[string]any{"command": "echo quick", "timeout": 30}); done.Status != statusCompleted || done.Output != "quick\n" {
		t.Fatalf("command within timeout: %+v", done)
	}
}

func TestNoChangeTimeoutThenView(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	// Gated as above: the answer can only be the no-change timer's.
	res := shellRun(t, ts, map[string]any{"command": "echo start; while [ ! -f gate ]; do sleep 0.02; done; echo end", "no_change_timeout": 2})
	if res.Status != statusNoChange || res.ExitCode != nil || res.Output != "start\n" {
		t.Fatalf("want no_change_timeout with partial output, before the command ends: %+v", res)
	}
	if err := os.WriteFile(filepath.Join(ts.ws, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "command to finish", func() bool {
		v := okData[shellResult](t, ts, "/v1/shell/view", map[string]any{"id": res.SessionID})
		return v.Status == statusCompleted && v.Output == "start\nend\n" && v.ExitCode != nil && *v.ExitCode == 0
	})
	// Output keeps the timer from firing: 4s of output every 0.4s under a
	// 2s timer (a gap would have to stretch five-fold to trip it).
	res = shellRun(t, ts, map[string]any{"command": "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.4; done", "no_change_timeout": 2})
	if res.Status != statusCompleted {
		t.Fatalf("steady output must not trip no_change_timeout: %+v", res)
	}
}

func TestAsyncViewKill(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	res := shellRun(t, ts, map[string]any{"command": "sleep 300 & echo $!; sleep 300", "async_mode": true})
	if res.Status != statusRunning || res.ExitCode != nil || !strings.Contains(string(mustJSON(t, res)), `"exit_code":null`) {
		t.Fatalf("async: %+v", res)
	}
	var pid int
	eventually(t, 5*time.Second, "pid in view", func() bool {
		v := okData[shellResult](t, ts, "/v1/shell/view", map[string]any{"id": res.SessionID})
		if v.Status != statusRunning || v.Output == "" {
			return false
		}
		pid = bgPid(t, v.Output)
		return true
	})
	killed := okData[killResult](t, ts, "/v1/shell/kill", map[string]any{"id": res.SessionID})
	if killed.Status != statusTerminated || killed.ExitCode == nil || killed.Returncode != 137 {
		t.Fatalf("kill: %+v", killed)
	}
	eventually(t, 5*time.Second, "background child to die", func() bool { return !alive(pid) })
	again := ts.post(t, "/v1/shell/kill", map[string]any{"id": res.SessionID})
	if again.Status != http.StatusOK || again.Message != "no running command" {
		t.Fatalf("second kill: %s", again.Body)
	}
}

// TestBackgroundChildOutlivesItsCommand: `server &` must not hold the
// command open (it completes at once) nor be killed when the command ends;
// deleting the session kills it.
func TestBackgroundChildOutlivesItsCommand(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	start := time.Now()
	res := shellRun(t, ts, map[string]any{"command": "sleep 300 & echo $!"})
	if res.Status != statusCompleted || time.Since(start) > 3*time.Second {
		t.Fatalf("command with a background child: %+v after %s", res, time.Since(start))
	}
	pid := bgPid(t, res.Output)
	time.Sleep(300 * time.Millisecond)
	if !alive(pid) {
		t.Fatal("background child killed when its command completed")
	}
	if next := shellRun(t, ts, map[string]any{"id": res.SessionID, "command": "echo next"}); next.Output != "next\n" {
		t.Fatalf("session after background child: %+v", next)
	}
	if r := ts.do(t, http.MethodDelete, "/v1/shell/sessions/"+res.SessionID, nil); r.Status != http.StatusOK {
		t.Fatalf("delete: %s", r.Body)
	}
	eventually(t, 5*time.Second, "background child to die with its session", func() bool { return !alive(pid) })
}

func TestSessionDeleteKillsItsCommands(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	res := shellRun(t, ts, map[string]any{"command": "sleep 300 & echo $!; wait", "no_change_timeout": 0.3})
	pid := bgPid(t, res.Output)
	if r := ts.do(t, http.MethodDelete, "/v1/shell/sessions/"+res.SessionID, nil); r.Status != http.StatusOK {
		t.Fatalf("delete: %s", r.Body)
	}
	eventually(t, 5*time.Second, "session's process to die", func() bool { return !alive(pid) })
	wantStatus(t, ts.do(t, http.MethodDelete, "/v1/shell/sessions/"+res.SessionID, nil), http.StatusNotFound, "")
	wantStatus(t, ts.post(t, "/v1/shell/view", map[string]any{"id": res.SessionID}), http.StatusNotFound, "")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type sseEvent struct {
	name, data string
	at         time.Time
}

// readSSE collects events until the stream ends.
func readSSE(t *testing.T, url, body string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur = sseEvent{name: strings.TrimPrefix(line, "event: ")}
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		case line == "" && cur.name != "":
			cur.at = time.Now()
			events = append(events, cur)
			cur = sseEvent{}
		}
	}
	return events
}

func TestShellExecSSEStreamsEventByEvent(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	events := readSSE(t, ts.URL+"/v1/shell/exec", `{"command":"echo a; sleep 1; echo b; pwd"}`)
	if len(events) < 3 || events[0].name != "start" || events[len(events)-1].name != "result" {
		t.Fatalf("events: %+v", events)
	}
	var first *sseEvent
	var streamed strings.Builder
	for i, e := range events {
		if e.name == "output" {
			var o struct{ Output string }
			_ = json.Unmarshal([]byte(e.data), &o)
			streamed.WriteString(o.Output)
			if first == nil {
				first = &events[i]
			}
		}
	}
	if first == nil || !strings.HasPrefix(first.data, `{"output":"a\n"`) {
		t.Fatalf("first output event: %+v", events)
	}
	result := events[len(events)-1]
	if gap := result.at.Sub(first.at); gap < 700*time.Millisecond {
		t.Fatalf("first chunk arrived only %s before the result: not streamed", gap)
	}
	var env struct {
		Success bool
		Data    shellResult
	}
	if err := json.Unmarshal([]byte(result.data), &env); err != nil || !env.Success {
		t.Fatalf("result event: %s", result.data)
	}
	want := "a\nb\n" + vWorkspace + "\n"
	if env.Data.Output != want || streamed.String() != want || *env.Data.ExitCode != 0 {
		t.Fatalf("streamed %q, result %+v, want %q", streamed.String(), env.Data, want)
	}
}

func TestLargeOutputIsCapped(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	res := shellRun(t, ts, map[string]any{"command": "echo BEGIN; head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END"})
	if len(res.Output) > DefaultMaxOutput+100 {
		t.Fatalf("output not capped: %d bytes", len(res.Output))
	}
	omitted := 10000000 + len("BEGIN\n\nEND\n") - DefaultMaxOutput
	marker := truncMarker(int64(omitted), "bytes")
	if !strings.HasPrefix(res.Output, "BEGIN\nxxx") || !strings.HasSuffix(res.Output, "xxx\nEND\n") || !strings.Contains(res.Output, marker) {
		t.Fatalf("head/marker/tail wrong: %q ... %q", res.Output[:20], res.Output[len(res.Output)-20:])
	}
}

func TestSecretsStrippedFromShellEnv(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t, "FOO_TOKEN=leak-me", "DB_PASSWORD=leak-me-too", "BAR_TOKEN=kept-value", sandboxspec.KeepEnvVar+"=BAR_TOKEN", "PLAIN_VAR=plain",
		"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer leak-otel") // the server's tracing, not the shell's
	out := shellRun(t, ts, map[string]any{"command": "env"}).Output
	for _, bad := range []string{"FOO_TOKEN", "leak-me", "DB_PASSWORD", sandboxspec.KeepEnvVar, "OTEL_", "leak-otel"} {
		if strings.Contains(out, bad) {
			t.Fatalf("env output contains %s:\n%s", bad, out)
		}
	}
	for _, good := range []string{"BAR_TOKEN=kept-value", "PLAIN_VAR=plain"} {
		if !strings.Contains(out, good) {
			t.Fatalf("env output lacks %s:\n%s", good, out)
		}
	}
}

// TestHostPathsNeverLeak drives commands and file calls that see host paths;
// every response is checked by the test client for the host root.
func TestHostPathsNeverLeak(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, cmd := range []string{
		"pwd; pwd -P; ls -d $PWD/..",
		"cd .. && pwd && ls",                 // /mnt/user-data: parent of three mappings
		"cd /mnt/skills && pwd -P && ls -la", // read-only mapping
		"readlink -f /mnt/user-data/outputs",
		"echo error >&2; ls /mnt/user-data/workspace/missing",
		"python3 -c 'import os; print(os.getcwd())' 2>/dev/null || pwd",
	} {
		res := shellRun(t, ts, map[string]any{"command": cmd})
		if strings.Contains(res.Output, "/mnt/") == false {
			t.Fatalf("%q: expected virtual paths in output, got %q", cmd, res.Output)
		}
	}
	sess := okData[shellResult](t, ts, "/v1/shell/exec", map[string]any{"command": "cd " + vWorkspace + "/.."})
	okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": sess.SessionID})
	bash := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"session_id": sess.SessionID, "command": "pwd; ls -d /mnt/user-data/uploads/nope"})
	if bash.Stdout != "/mnt/user-data\n" || !strings.Contains(bash.Stderr, "/mnt/user-data/uploads/nope") {
		t.Fatalf("bash output not reverse-mapped: %+v", bash)
	}
	ts.post(t, "/v1/file/read", map[string]any{"file": vWorkspace + "/missing"})
	ts.post(t, "/v1/file/list", map[string]any{"path": "/mnt/user-data", "recursive": true})
	ts.post(t, "/v1/file/write", map[string]any{"file": "/mnt/skills/x", "content": "x"})
	ts.post(t, "/v1/file/list", map[string]any{"path": vSkills})
}

func TestShellErrors(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, tc := range []struct {
		path   string
		body   any
		status int
		field  string
	}{
		{"/v1/shell/exec", `{"command": "echo`, http.StatusBadRequest, ""},
		{"/v1/shell/exec", ``, http.StatusBadRequest, ""},
		{"/v1/shell/exec", `{"command":"x"} trailing`, http.StatusBadRequest, ""},
		{"/v1/shell/exec", map[string]any{}, http.StatusUnprocessableEntity, "command"},
		{"/v1/shell/exec", map[string]any{"command": "  "}, http.StatusUnprocessableEntity, "command"},
		{"/v1/shell/exec", map[string]any{"command": 42}, http.StatusUnprocessableEntity, "command"},
		{"/v1/shell/exec", map[string]any{"command": "true", "hard_timeout": -1}, http.StatusUnprocessableEntity, "hard_timeout"},
		{"/v1/shell/exec", map[string]any{"command": "true", "async_mode": "yes"}, http.StatusUnprocessableEntity, "async_mode"},
		{"/v1/shell/exec", map[string]any{"command": "true", "id": "nope"}, http.StatusNotFound, ""},
		{"/v1/shell/exec", map[string]any{"command": "true", "exec_dir": "/etc"}, http.StatusForbidden, ""},
		{"/v1/shell/exec", map[string]any{"command": "true", "exec_dir": vWorkspace + "/../../../.."}, http.StatusForbidden, ""},
		{"/v1/shell/exec", map[string]any{"command": "true", "exec_dir": vWorkspace + "/nope"}, http.StatusNotFound, ""},
		{"/v1/shell/exec", map[string]any{"command": "true", "env": map[string]any{"A=B": "x"}}, http.StatusUnprocessableEntity, "env"},
		{"/v1/shell/view", map[string]any{}, http.StatusUnprocessableEntity, "id"},
		{"/v1/shell/view", map[string]any{"id": "nope"}, http.StatusNotFound, ""},
		{"/v1/shell/kill", map[string]any{"id": "nope"}, http.StatusNotFound, ""},
		{"/v1/shell/sessions/create", map[string]any{"exec_dir": "/etc"}, http.StatusForbidden, ""},
		{"/v1/bash/exec", map[string]any{}, http.StatusUnprocessableEntity, "command"},
		{"/v1/bash/exec", map[string]any{"command": "true", "session_id": "nope"}, http.StatusNotFound, ""},
		{"/v1/bash/exec", map[string]any{"command": "true", "max_output_length": -1}, http.StatusUnprocessableEntity, "max_output_length"},
		{"/v1/no/such", map[string]any{}, http.StatusNotFound, ""},
	} {
		t.Run(tc.path+" "+string(mustJSON(t, tc.body)), func(t *testing.T) {
			wantStatus(t, ts.post(t, tc.path, tc.body), tc.status, tc.field)
		})
	}
	wantStatus(t, ts.do(t, http.MethodDelete, "/v1/shell/sessions/nope", nil), http.StatusNotFound, "")
}
