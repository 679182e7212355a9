package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// cliResult is one run of the gateway binary as the operator CLI.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs bin with args against base with token (SANDGATE_URL and
// SANDGATE_TOKEN, as an operator's shell would have them).
func runCLI(t *testing.T, bin, base, token string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+base, "SANDGATE_TOKEN="+token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return cliResult{code, out.String(), errb.String()}
}

func (r cliResult) must(t *testing.T, code int, what string) cliResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

type cliSandbox struct {
	SandboxID   string   `json:"sandbox_id"`
	User        string   `json:"user"`
	Thread      string   `json:"thread"`
	Backend     string   `json:"backend"`
	State       string   `json:"state"`
	Alive       *bool    `json:"alive"`
	MemoryBytes *int64   `json:"memory_bytes"`
	CPUPercent  *float64 `json:"cpu_percent"`
}

func lsJSON(t *testing.T, bin, base, token string, filters ...string) []cliSandbox {
	t.Helper()
	r := runCLI(t, bin, base, token, append([]string{"sandboxes", "ls", "-o", "json"}, filters...)...).must(t, 0, "ls")
	var list struct {
		Sandboxes []cliSandbox `json:"sandboxes"`
		Count     int          `json:"count"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || list.Count != len(list.Sandboxes) {
		t.Fatalf("ls -o json: %v: %s", err, r.stdout)
	}
	return list.Sandboxes
}

func create(t *testing.T, base, key, thread string) string {
	t.Helper()
	code, body, _ := call(t, "PUT", base+"/threads/"+thread+"/sandbox", nil, "Authorization", "Bearer "+key)
	if code != 200 {
		t.Fatalf("create %s: %d %s", thread, code, body)
	}
	var v sandboxView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v.SandboxID
}

// TestCLIOperator: every operator subcommand of the real binary against a
// real gateway (process backend) with an admin and two users.
func TestCLIOperator(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":admin,alice="+sha("alice-key")+",bob="+sha("bob-key"))
	g := f.start()
	bin, base, admin := f.bin, g.URL, "ops-key"
	a1 := create(t, base, "alice-key", "a1")
	a2 := create(t, base, "alice-key", "a2")
	b1 := create(t, base, "bob-key", "b1")

	// ls: all, filtered, as a table; a user's key is refused (exit 1).
	if got := lsJSON(t, bin, base, admin); len(got) != 3 {
		t.Fatalf("ls: %d sandboxes, want 3: %+v", len(got), got)
	}
	if got := lsJSON(t, bin, base, admin, "--user", "alice"); len(got) != 2 || got[0].User != "alice" || got[1].User != "alice" {
		t.Fatalf("ls --user alice: %+v", got)
	}
	if got := lsJSON(t, bin, base, admin, "--user", "bob", "--thread", "b1", "--state", "active", "--backend", "process"); len(got) != 1 || got[0].SandboxID != b1 {
		t.Fatalf("ls bob/b1: %+v, want %s", got, b1)
	}
	if got := lsJSON(t, bin, base, admin, "--state", "warm"); len(got) != 0 {
		t.Fatalf("ls --state warm: %+v", got)
	}
	table := runCLI(t, bin, base, admin, "sandboxes", "ls").must(t, 0, "ls table").stdout
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "SANDBOX ID") ||
		!strings.Contains(table, a1) || strings.Contains(table, "\x1b") {
		t.Fatalf("ls table:\n%s", table)
	}
	if r := runCLI(t, bin, base, "alice-key", "sandboxes", "ls").must(t, 1, "ls as a user"); !strings.Contains(r.stderr, "403 forbidden") {
		t.Fatalf("ls as a user: %s", r.stderr)
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "ls", "--bogus").must(t, 2, "bad flag"); strings.Count(r.stderr, "--bogus")+strings.Count(r.stderr, "-bogus") == 0 {
		t.Fatalf("bad flag: %s", r.stderr)
	}
	runCLI(t, bin, base, admin, "sandboxes", "ls", "-o", "yaml").must(t, 2, "-o yaml")
	runCLI(t, bin, base, admin, "sandboxes", "frobnicate").must(t, 2, "unknown subcommand")
	runCLI(t, bin, base, admin, "sandboxes", "ls", "--state", "sleeping").must(t, 1, "bad state (the gateway's 400)")

	// inspect: flags after the id, as kubectl takes them.
	r := runCLI(t, bin, base, admin, "sandboxes", "inspect", a1, "-o", "json").must(t, 0, "inspect")
	var insp []cliSandbox
	if err := json.Unmarshal([]byte(r.stdout), &insp); err != nil || len(insp) != 1 || insp[0].User != "alice" || insp[0].Thread != "a1" ||
		insp[0].Alive == nil || !*insp[0].Alive {
		t.Fatalf("inspect: %v %s", err, r.stdout)
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "inspect", "0123456789abcdef").must(t, 1, "inspect unknown"); !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("inspect unknown: %s", r.stderr)
	}

	// logs: the sandbox server's own startup line.
	if r := runCLI(t, bin, base, admin, "sandboxes", "logs", a1).must(t, 0, "logs"); !strings.Contains(r.stdout, "sandbox server listening") ||
		strings.Contains(r.stdout, f.dataDir) {
		t.Fatalf("logs: no line of the sandbox server, or a host path in them:\n%s", r.stdout)
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "logs", "--tail", "1", a1).must(t, 0, "logs --tail 1"); strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
		t.Fatalf("logs --tail 1: %q", r.stdout)
	}

	// top: CPU and memory of every sandbox.
	r = runCLI(t, bin, base, admin, "sandboxes", "top", "--once", "--interval", "300ms", "-o", "json").must(t, 0, "top")
	var top struct {
		Supported bool         `json:"supported"`
		Sandboxes []cliSandbox `json:"sandboxes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &top); err != nil || !top.Supported || len(top.Sandboxes) != 3 {
		t.Fatalf("top: %v %s", err, r.stdout)
	}
	for _, s := range top.Sandboxes {
		if s.MemoryBytes == nil || *s.MemoryBytes <= 0 || s.CPUPercent == nil || *s.CPUPercent < 0 {
			t.Fatalf("top: no figures for %s: %s", s.SandboxID, r.stdout)
		}
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "top", "--once", "--interval", "100ms").must(t, 0, "top table"); !strings.Contains(r.stdout, "CPU %") || !strings.Contains(r.stdout, "MiB") {
		t.Fatalf("top table:\n%s", r.stdout)
	}

	// logs -f streams: the startup line arrives while the command runs, and
	// the stream ends when the sandbox is destroyed.
	follow := exec.Command(bin, "sandboxes", "logs", "-f", b1)
	follow.Env = append(os.Environ(), "SANDGATE_URL="+base, "SANDGATE_TOKEN="+admin)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill() })
	seen := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "sandbox server listening") {
				seen <- true
				for sc.Scan() { // drain until the stream ends
				}
				return
			}
		}
		seen <- false
	}()
	select {
	case ok := <-seen:
		if !ok {
			t.Fatal("logs -f ended without the sandbox server's line")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("logs -f: no line in 20s")
	}
	runCLI(t, bin, base, admin, "sandboxes", "destroy", b1).must(t, 0, "destroy")
	waited := make(chan error, 1)
	go func() { waited <- follow.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("logs -f after destroy: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("logs -f did not end when its sandbox was destroyed")
	}
	if got := lsJSON(t, bin, base, admin, "--user", "bob"); len(got) != 0 {
		t.Fatalf("after destroy: %+v", got)
	}
	runCLI(t, bin, base, admin, "sandboxes", "destroy", b1).must(t, 1, "destroy twice")

	// threads rm: refused without -y off a terminal; with it, sandbox and data go.
	dir := filepath.Join(f.dataDir, "users", "alice", "threads", "a2")
	code, body, _ := call(t, "POST", base+"/threads/a2/v1/shell/exec", map[string]any{"command": "echo kept > /mnt/user-data/workspace/f"},
		"Authorization", "Bearer alice-key")
	if _, err := os.Stat(filepath.Join(dir, "user-data", "workspace", "f")); code != 200 || err != nil {
		t.Fatalf("write thread data: %d %s %v", code, body, err)
	}
	if r := runCLI(t, bin, base, admin, "threads", "rm", "--user", "alice", "a2").must(t, 2, "threads rm without -y"); !strings.Contains(r.stderr, "-y") {
		t.Fatalf("threads rm without -y: %s", r.stderr)
	}
	runCLI(t, bin, base, admin, "threads", "rm", "a2", "-y").must(t, 2, "threads rm without --user")
	r = runCLI(t, bin, base, admin, "threads", "rm", "--user", "alice", "-y", "a2", "-o", "json").must(t, 0, "threads rm")
	if !strings.Contains(r.stdout, `"sandbox_destroyed": true`) || !strings.Contains(r.stdout, `"data": "removed"`) {
		t.Fatalf("threads rm: %s", r.stdout)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("thread data still there after threads rm: %v", err)
	}
	if got := lsJSON(t, bin, base, admin, "--user", "alice"); len(got) != 1 || got[0].SandboxID != a1 {
		t.Fatalf("after threads rm: %+v, want only %s (not %s)", got, a1, a2)
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, "users", "alice", "threads", "a1")); err != nil {
		t.Fatalf("threads rm touched another thread's data: %v", err)
	}

	// prune: nothing of this fleet is left over; a dry run by default.
	if r := runCLI(t, bin, base, admin, "prune", "-o", "json").must(t, 0, "prune"); !strings.Contains(r.stdout, `"dry_run": true`) {
		t.Fatalf("prune: %s", r.stdout)
	}
}

// TestCLIPruneLeavesOtherFleet: two fleets (own Redis each, fleet alpha
// and beta) share one Docker engine and even a container prefix. prune in
// alpha removes alpha's stopped container and nothing of beta's, running
// or stopped; alpha's reconciler does not adopt beta's running sandbox.
func TestCLIPruneLeavesOtherFleet(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	keys := "ops=" + sha("ops-key") + ":admin,alice=" + sha("alice-key") + ",bob=" + sha("bob-key")
	beta := d.fleet("--fleet", "beta", "--auth-api-keys", keys)
	bg := beta.start()
	bRun := create(t, bg.URL, "bob-key", "beta-running")
	bStop := create(t, bg.URL, "bob-key", "beta-stopped")
	bg.stop() // beta's sandboxes stay, as a fleet's do

	alpha := d.fleet("--fleet", "alpha", "--auth-api-keys", keys, "--reconcile-interval", "500ms", "--reconcile-grace", "1s")
	ag := alpha.start()
	aStop := create(t, ag.URL, "alice-key", "alpha-stopped")
	create(t, ag.URL, "alice-key", "alpha-running")
	ctx := context.Background()
	stop := func(sid string) {
		timeout := 1
		if err := d.api.ContainerStop(ctx, d.prefix+"-"+sid, container.StopOptions{Timeout: &timeout}); err != nil {
			t.Fatalf("stop %s: %v", sid, err)
		}
	}
	stop(bStop)
	stop(aStop)
	for _, c := range d.containers() {
		if c.Labels[backend.LabelSandboxID] == bRun && c.Labels[backend.LabelFleet] != "beta" {
			t.Fatalf("beta's container carries fleet %q", c.Labels[backend.LabelFleet])
		}
	}
	time.Sleep(2500 * time.Millisecond) // past the grace, a few reconcile passes

	bin, admin := alpha.bin, "ops-key"
	for _, s := range lsJSON(t, bin, ag.URL, admin) {
		if s.User == "bob" {
			t.Fatalf("alpha adopted beta's sandbox %s", s.SandboxID)
		}
	}
	r := runCLI(t, bin, ag.URL, admin, "prune").must(t, 0, "prune dry run")
	if !strings.Contains(r.stdout, aStop) || strings.Contains(r.stdout, bStop) || strings.Contains(r.stdout, bRun) ||
		!strings.Contains(r.stderr, "--force") {
		t.Fatalf("prune dry run:\n%s\n%s", r.stdout, r.stderr)
	}
	r = runCLI(t, bin, ag.URL, admin, "prune", "--force", "-o", "json").must(t, 0, "prune --force")
	var rep struct {
		Fleet  string `json:"fleet"`
		DryRun bool   `json:"dry_run"`
		Items  []struct {
			Kind, SandboxID, Error string
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Fleet != "alpha" || rep.DryRun || len(rep.Items) != 1 ||
		rep.Items[0].Kind != "container" || rep.Items[0].Error != "" {
		t.Fatalf("prune --force: %v %s", err, r.stdout)
	}
	left := map[string]string{}
	for _, c := range d.containers() {
		left[c.Labels[backend.LabelSandboxID]] = c.State
	}
	if _, ok := left[aStop]; ok {
		t.Errorf("alpha's stopped container survived prune: %v", left)
	}
	if left[bRun] != container.StateRunning || left[bStop] != container.StateExited {
		t.Errorf("prune touched beta's containers: %v", left)
	}
}

// TestCLIVersionStamped: make build stamps the version --version prints.
func TestCLIVersionStamped(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("make")
	testutil.Require(t, err == nil, "make")
	dir := t.TempDir()
	cmd := exec.Command("make", "build", "BINDIR="+dir, "VERSION=v9.8.7-e2e", "REVISION=0123abcd")
	cmd.Dir = testutil.ModuleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "gateway")
	// A gateway of that build: `version` shows its build too.
	f := newFleet(t)
	f.bin = bin
	g := f.start()
	for _, arg := range []string{"--version", "version", "-version"} {
		r := runCLI(t, bin, g.URL, "", arg).must(t, 0, arg)
		if !strings.HasPrefix(r.stdout, "gateway v9.8.7-e2e (revision 0123abcd) go") {
			t.Errorf("%s: %q", arg, r.stdout)
		}
		server := strings.Contains(r.stdout, "\nserver "+g.URL+": gateway v9.8.7-e2e (revision 0123abcd)\n")
		if server != (arg == "version") {
			t.Errorf("%s: the server's version shown: %v, want only for the command: %q", arg, server, r.stdout)
		}
	}
	r := runCLI(t, bin, g.URL, "", "version", "-o", "json").must(t, 0, "version -o json")
	var v struct {
		Version, Revision string
		Server            struct{ Version, Revision string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Version != "v9.8.7-e2e" || v.Revision != "0123abcd" ||
		v.Server.Version != "v9.8.7-e2e" || v.Server.Revision != "0123abcd" {
		t.Errorf("version -o json: %v %s", err, r.stdout)
	}
}
