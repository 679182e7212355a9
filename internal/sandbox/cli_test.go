package sandbox

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestBinaryListenFD runs the real `gateway sandbox` the way the process
// backend does: a pre-bound listener passed as fd 3, host-mode mappings, a
// launcher-chosen environment. It checks the CLI contract, secret
// stripping, the output cap and memory with a 10 MB output, and that
// SIGTERM kills running commands and exits cleanly.
func TestBinaryListenFD(t *testing.T) {
	t.Parallel()
	bin := testutil.GatewayBinary(t)
	root := filepath.Join(t.TempDir(), "hostroot-cli")
	ws, skills := filepath.Join(root, "ws"), filepath.Join(root, "skills")
	for _, d := range []string{ws, skills} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lf, base := testutil.ListenerFile(t)

	const maxOut = 256 << 10
	cmd := osexec.Command(bin, "sandbox", "--listen-fd", "3", "--max-output", strconv.Itoa(maxOut),
		"--map", vWorkspace+"="+ws, "--map-ro", vSkills+"="+skills)
	cmd.ExtraFiles = []*os.File{lf}
	cmd.Env = append(os.Environ(), "FOO_TOKEN=leak-me", "KEEP_TOKEN=kept-value", sandboxspec.KeepEnvVar+"=KEEP_TOKEN")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = lf.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v (server stderr: %s)", method, path, err, stderr.String())
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if strings.Contains(string(raw), root) {
			t.Fatalf("%s %s reveals host path: %s", method, path, raw)
		}
		return res.StatusCode, string(raw)
	}
	status, body := call(http.MethodGet, "/v1/sandbox", "")
	t.Logf("first 200 on /v1/sandbox %s after start", time.Since(start))
	if status != http.StatusOK || !strings.Contains(body, `"home_dir":"`+vWorkspace+`"`) {
		t.Fatalf("/v1/sandbox: %d %s", status, body)
	}

	var res struct{ Data shellResult }
	exec := func(body string) shellResult {
		t.Helper()
		status, raw := call(http.MethodPost, "/v1/shell/exec", body)
		if err := json.Unmarshal([]byte(raw), &res); err != nil || status != http.StatusOK {
			t.Fatalf("exec %s: %d %s", body, status, raw)
		}
		return res.Data
	}
	env := exec(`{"command":"pwd; env"}`).Output
	if !strings.HasPrefix(env, vWorkspace+"\n") || !strings.Contains(env, "KEEP_TOKEN=kept-value") ||
		strings.Contains(env, "FOO_TOKEN") || strings.Contains(env, sandboxspec.KeepEnvVar) {
		t.Fatalf("env in sandbox:\n%s", env)
	}

	// The default umask (077): what a command writes is nobody else's.
	exec(`{"command":"echo x > written && mkdir made"}`)
	for name, want := range map[string]os.FileMode{"written": 0o600, "made": 0o700 | os.ModeDir} {
		if st, err := os.Stat(filepath.Join(ws, name)); err != nil || st.Mode() != want {
			t.Fatalf("%s written by a command: %v %v, want mode %v", name, st, err, want)
		}
	}

	big := exec(`{"command":"head -c 10000000 /dev/zero | tr '\\0' x"}`)
	if len(big.Output) > maxOut+100 || !strings.Contains(big.Output, truncMarker(10000000-maxOut, "bytes")) {
		t.Fatalf("10 MB output: %d bytes returned", len(big.Output))
	}
	if hwm := peakRSS(t, cmd.Process.Pid); hwm > 96<<20 {
		t.Fatalf("server peak RSS %d MiB after a 10 MB output", hwm>>20)
	}

	running := exec(`{"command":"sleep 300 & echo $!; sleep 300","no_change_timeout":0.3}`)
	pid := bgPid(t, running.Output)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	eventually(t, 5*time.Second, "command process group to die on shutdown", func() bool { return !alive(pid) })
	if !strings.Contains(stderr.String(), `"msg":"sandbox server listening"`) {
		t.Fatalf("no startup log: %s", stderr.String())
	}
}

func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func TestBinaryRejectsBadFlags(t *testing.T) {
	t.Parallel()
	bin := testutil.GatewayBinary(t)
	for _, args := range [][]string{
		{"--map", "no-equals-sign"},
		{"--map", "relative=/tmp"},
		{"--map", "/mnt/x=/tmp", "--home", "/elsewhere"},
		{"--listen-fd", "99"},
		{"stray-argument"},
		{"--umask", "999"},
	} {
		out, err := osexec.Command(bin, append([]string{"sandbox"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "gateway:") {
			t.Errorf("sandbox %v: err %v, output %q", args, err, out)
		}
	}
}
