package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestCommandLogThroughTheGateway is issue 40's point 8: the commands an
// agent ran, their exit codes and who ran them, read back through
// `gateway sandboxes logs` (and -f, which sees a new one arrive) and the
// status page's sandbox detail (process backend, real gateway). A client
// that sends the caller header itself is recorded as who it is, not as
// who it claims to be.
func TestCommandLogThroughTheGateway(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":admin,alice="+sha("alice-key"))
	g := f.start()
	bin, base, admin := f.bin, g.URL, "ops-key"
	sid := create(t, base, "alice-key", "work")
	auth := []string{"Authorization", "Bearer alice-key"}

	if out := shell(t, base, "work", "printf hello", auth...); out.ExitCode == nil || *out.ExitCode != 0 {
		t.Fatalf("printf: %+v", out)
	}
	// The forged caller: the gateway replaces it with alice.
	if out := shell(t, base, "work", "exit 7", append(auth, sandboxspec.CallerHeader, "ops")...); out.ExitCode == nil || *out.ExitCode != 7 {
		t.Fatalf("exit 7: %+v", out)
	}
	code, body, _ := call(t, "POST", base+"/threads/work/v1/shell/exec", map[string]any{"command": "sleep 5", "hard_timeout": 0.3}, auth...)
	if code != 200 {
		t.Fatalf("hard timeout: %d %s", code, body)
	}

	records := func(out string) map[string]sandboxspec.CommandRecord {
		got := map[string]sandboxspec.CommandRecord{}
		for line := range strings.SplitSeq(out, "\n") {
			if !strings.Contains(line, `"msg":"command ended"`) {
				continue
			}
			var rec sandboxspec.CommandRecord
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line: %v: %s", err, line)
			}
			got[rec.Command] = rec
		}
		return got
	}
	r := runCLI(t, bin, base, admin, "sandboxes", "logs", sid).must(t, 0, "logs")
	got := records(r.stdout)
	for cmd, want := range map[string]struct {
		status string
		code   int
		output int64
	}{
		"printf hello": {"completed", 0, 5},
		"exit 7":       {"completed", 7, 0},
		"sleep 5":      {"hard_timeout", 137, 0},
	} {
		rec, ok := got[cmd]
		if !ok || rec.Who != "alice" || rec.Status != want.status || rec.ExitCode != want.code || rec.OutputBytes != want.output {
			t.Errorf("logs: %q recorded as %+v (found %v); want who alice, %+v\n%s", cmd, rec, ok, want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, `"who":"ops"`) {
		t.Errorf("the forged caller reached the record:\n%s", r.stdout)
	}

	// -f: a command run while it follows shows up.
	follow := exec.Command(bin, "sandboxes", "logs", "-f", sid)
	follow.Env = append(os.Environ(), "SANDGATE_URL="+base, "SANDGATE_TOKEN="+admin)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The stream is open once it replays the old lines.
	for seen := false; !seen; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("logs -f ended early")
			}
			seen = strings.Contains(l, `"command":"sleep 5"`)
		case <-time.After(20 * time.Second):
			t.Fatal("logs -f: no replay in 20s")
		}
	}
	shell(t, base, "work", "echo followed; false", auth...)
	for seen := false; !seen; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("logs -f ended before the new command")
			}
			seen = strings.Contains(l, `"command":"echo followed; false"`) && strings.Contains(l, `"exit_code":1`) &&
				strings.Contains(l, `"who":"alice"`)
		case <-time.After(20 * time.Second):
			t.Fatal("logs -f: the new command did not show up in 20s")
		}
	}

	// The status page's detail lists them, newest first, with exit codes.
	c := statusLogin(t, base, admin)
	code, page, _ := call(t, "GET", base+"/status/sandboxes/"+sid, nil, "Cookie", c.Name+"="+c.Value)
	html := string(page)
	if code != 200 || !strings.Contains(html, `id="commands"`) {
		t.Fatalf("detail: %d, no commands table:\n%s", code, html)
	}
	newest, oldest := strings.Index(html, "echo followed; false"), strings.Index(html, "printf hello")
	if newest < 0 || oldest < 0 || newest > oldest || !strings.Contains(html, `class="exit failed">7<`) ||
		!strings.Contains(html, `class="exit">0<`) || !strings.Contains(html, "hard_timeout") || !strings.Contains(html, "<td>alice</td>") {
		t.Fatalf("detail: the commands are not listed as run:\n%s", html)
	}
}
