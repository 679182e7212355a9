package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// sharedKey is the fleet's sandbox_api_key in these tests: it must open no
// sandbox that has a secret of its own.
const sharedKey = "shared-sandbox-api-key-for-third-party-images"

// v1Attacks are the sandbox API calls an attacker would make: run a
// command, read and plant files, download, open a terminal, probe.
var v1Attacks = []struct{ method, path, body string }{
	{"GET", "/v1/sandbox", ""},
	{"POST", "/v1/shell/exec", `{"command":"id > /tmp/pwned"}`},
	{"POST", "/v1/file/read", `{"file":"/etc/shadow"}`},
	{"POST", "/v1/file/write", `{"file":"/mnt/user-data/workspace/planted","content":"x"}`},
	{"GET", "/v1/file/download?path=/etc/passwd", ""},
	{"GET", "/v1/shell/ws", ""},
	{"POST", "/v1/no-such-endpoint", "{}"},
}

// direct sends one request straight to the sandbox server at sandboxURL
// (http:// or unix://), bypassing the gateway, with key in
// sandboxspec.SecretHeader ("" = none); it returns the status.
func direct(t *testing.T, sandboxURL, method, path, body, key string) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, base := backend.Client(sandboxURL)
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(sandboxspec.SecretHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, sandboxURL, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusUnauthorized && !bytes.Contains(b, []byte(`"success":false`)) {
		t.Fatalf("401 without the JSON envelope: %s", b)
	}
	return resp.StatusCode
}

// attackFromHost: every /v1 call without the sandbox's own secret is 401,
// whatever else it carries; the own secret opens it (so the 401s are the
// check, not an unreachable server).
func attackFromHost(t *testing.T, sandboxURL, own string, others ...string) {
	t.Helper()
	for _, key := range append([]string{"", sharedKey, own[:len(own)-1], own + "A"}, others...) {
		for _, a := range v1Attacks {
			if code := direct(t, sandboxURL, a.method, a.path, a.body, key); code != http.StatusUnauthorized {
				t.Errorf("%s %s with key %.8q...: %d, want 401", a.method, a.path, key, code)
			}
		}
	}
	if code := direct(t, sandboxURL, "GET", "/v1/sandbox", "", own); code != http.StatusOK {
		t.Fatalf("the sandbox's own secret: %d, want 200", code)
	}
}

// asNobody runs argv as the unprivileged user nobody (65534): a local user
// of the gateway's machine who is not the gateway. It returns the combined
// output and whether the command succeeded.
func asNobody(t *testing.T, argv ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %q as nobody: %v", argv, err)
	}
	return string(out), err == nil
}

// curlStatus is a curl command line that prints only the HTTP status of a
// request to path of the sandbox at sandboxURL (http:// or unix://) with
// the given header lines; 000 when it cannot connect.
func curlStatus(method, sandboxURL, path, body string, headers ...string) []string {
	argv := []string{"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "-X", method}
	base, socket := backend.HTTPBase(sandboxURL)
	if socket != "" {
		argv = append(argv, "--unix-socket", socket)
	}
	for _, h := range headers {
		argv = append(argv, "-H", h)
	}
	if body != "" {
		argv = append(argv, "-H", "Content-Type: application/json", "--data", body)
	}
	return append(argv, base+path)
}

// TestSandboxSecretProcessBackend attacks process-backend sandbox servers
// the way issue 15 did: from the host, from a local unprivileged user and
// from a command in another sandbox, with no key, the shared key and the
// other sandbox's secret. From the host every one is 401; the local user
// gets 401 or cannot reach the socket (000); from another sandbox it is 401
// for plain children and unreachable (000) for isolated ones, whose
// sandboxes share no socket. The gateway's own requests work; the secret is
// in no environment, command line, sandbox file, log or API answer.
func TestSandboxSecretProcessBackend(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Getuid() == 0, "root (to run commands as the unprivileged user nobody)")
	_, err := exec.LookPath("curl")
	testutil.Require(t, err == nil, "curl")
	for _, tc := range []struct{ isolation, fromSandbox string }{
		{process.IsolationNamespaces, "000"},
		{process.IsolationNone, "401"},
	} {
		t.Run(tc.isolation, func(t *testing.T) {
			t.Parallel()
			sandboxSecretAttacks(t, tc.isolation, tc.fromSandbox)
		})
	}
}

func sandboxSecretAttacks(t *testing.T, isolation, fromSandbox string) {
	f := newFleet(t, "--sandbox-api-key", sharedKey, "--process-isolation", isolation)
	g := f.start()

	// The gateway's requests succeed.
	for _, th := range []string{"alice-t", "bob-t"} {
		if out := shell(t, g.URL, th, "echo ok-"+th).Output; !strings.Contains(out, "ok-"+th) {
			t.Fatalf("exec through the gateway in %s: %q", th, out)
		}
	}
	byThread := map[string]backend.Info{}
	for _, info := range f.sandboxes() {
		byThread[info.Thread] = info
	}
	alice, bob := byThread["alice-t"], byThread["bob-t"]
	if len(alice.Secret) < 32 || len(bob.Secret) < 32 || alice.Secret == bob.Secret {
		t.Fatalf("per-sandbox secrets: alice %d chars, bob %d chars, equal %v", len(alice.Secret), len(bob.Secret), alice.Secret == bob.Secret)
	}

	// From the host, with nothing, the shared key, near misses and the other sandbox's secret.
	attackFromHost(t, alice.URL, alice.Secret, bob.Secret)
	attackFromHost(t, bob.URL, bob.Secret, alice.Secret)

	// From a local unprivileged user (issue 15, finding 2).
	for _, key := range []string{"", sharedKey, bob.Secret} {
		hdr := []string{}
		if key != "" {
			hdr = append(hdr, sandboxspec.SecretHeader+": "+key)
		}
		for _, a := range v1Attacks {
			// 000: the socket's dir is the gateway's alone (attackFromHost
			// showed the server answers).
			out, _ := asNobody(t, curlStatus(a.method, alice.URL, a.path, a.body, hdr...)...)
			if out != "401" && out != "000" {
				t.Errorf("nobody: %s %s: %q, want 401 or 000", a.method, a.path, out)
			}
		}
	}
	// nobody can read neither the backend's state (where the secret is kept) nor the server's environment.
	state := filepath.Join(f.dataDir, "sandboxes", "process", alice.SandboxID+".json")
	if out, ok := asNobody(t, "cat", state); ok || strings.Contains(out, alice.Secret) {
		t.Errorf("nobody read the sandbox state: %q", out)
	}
	pid := serverPID(t, alice)
	for _, file := range []string{"environ", "mem", "fd/5"} {
		if out, ok := asNobody(t, "cat", "/proc/"+strconv.Itoa(pid)+"/"+file); ok {
			t.Errorf("nobody read /proc/%d/%s: %.80q", pid, file, out)
		}
	}

	// From a command in bob's sandbox to alice's server's socket.
	for _, key := range []string{"", sharedKey, bob.Secret} {
		hdr := []string{}
		if key != "" {
			hdr = append(hdr, sandboxspec.SecretHeader+": "+key)
		}
		for _, a := range v1Attacks {
			if out := shell(t, g.URL, "bob-t", shellQuote(curlStatus(a.method, alice.URL, a.path, a.body, hdr...))).Output; strings.TrimSpace(out) != fromSandbox {
				t.Errorf("from bob's sandbox: %s %s: %q, want %s", a.method, a.path, out, fromSandbox)
			}
		}
	}

	// The secret is in no environment, command line or sandbox file.
	for _, info := range []backend.Info{alice, bob} {
		pid := serverPID(t, info)
		for _, file := range []string{"environ", "cmdline"} {
			raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
			if err != nil {
				t.Fatalf("read the server's %s (as root): %v", file, err)
			}
			if bytes.Contains(raw, []byte(info.Secret)) {
				t.Errorf("the secret of %s is in /proc/%d/%s", info.Thread, pid, file)
			}
		}
		env := shell(t, g.URL, info.Thread, "env; cat /proc/$$/environ | tr '\\0' '\\n'").Output
		if strings.Contains(env, alice.Secret) || strings.Contains(env, bob.Secret) {
			t.Errorf("a secret is in the environment of a shell of %s", info.Thread)
		}
		if strings.Contains(env, sharedKey) {
			t.Errorf("the shared key is in the environment of a shell of %s", info.Thread)
		}
	}
	files := shell(t, g.URL, "alice-t", "grep -rlF -e '"+alice.Secret+"' -e '"+bob.Secret+"' /mnt/user-data 2>/dev/null; echo done").Output
	if strings.TrimSpace(files) != "done" {
		t.Errorf("a secret is in a file the sandbox can read: %q", files)
	}

	// Nothing returns or logs it.
	for _, path := range []string{"/threads/alice-t/sandbox", "/api/sandboxes", "/api/sandboxes/" + alice.SandboxID} {
		_, body, _ := call(t, "GET", g.URL+path, nil)
		if bytes.Contains(body, []byte(alice.Secret)) || bytes.Contains(body, []byte(bob.Secret)) {
			t.Errorf("GET %s returns a sandbox secret", path)
		}
	}
	logs := g.logs.String()
	sandboxLogs, _ := filepath.Glob(filepath.Join(f.dataDir, "sandboxes", "process", "*.log"))
	for _, l := range sandboxLogs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		logs += string(b)
	}
	if len(sandboxLogs) == 0 || !strings.Contains(logs, "sandbox server listening") {
		t.Fatalf("no sandbox logs to check (%d files)", len(sandboxLogs))
	}
	for _, s := range []string{alice.Secret, bob.Secret} {
		if strings.Contains(logs, s) {
			t.Errorf("a sandbox secret is in the logs")
		}
	}

	// The gateway still works after all that, and a replacement incarnation gets a new secret.
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/alice-t/sandbox?destroy=true", nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", code, body)
	}
	shell(t, g.URL, "alice-t", "true")
	for _, info := range f.sandboxes() {
		if info.Thread == "alice-t" && (info.Secret == alice.Secret || info.Secret == "") {
			t.Errorf("the recreated sandbox has secret reused=%v empty=%v", info.Secret == alice.Secret, info.Secret == "")
		}
	}
}

// serverPID is the pid of a process-backend sandbox's server.
func serverPID(t *testing.T, info backend.Info) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.SplitN(info.Incarnation, "-", 2)[0])
	if err != nil {
		t.Fatalf("incarnation %q: %v", info.Incarnation, err)
	}
	return pid
}

// shellQuote joins argv into one POSIX shell command line.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
