package process

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Not parallel: t.Setenv changes the gateway environment the child inherits.
// The plain child (process_isolation: none) inherits the gateway's
// environment minus its secrets.
func TestChildEnvironment(t *testing.T) {
	t.Setenv("SANDGATE_TEST_SECRET_TOKEN", "leak-1")
	t.Setenv("PROCESS_TEST_DB_PASSWORD", "leak-2")
	t.Setenv("SANDGATE_REDIS_URL", "redis://:leak-3@127.0.0.1:6379")
	t.Setenv("PROCESS_TEST_PLAIN", "inherited")
	t.Setenv("PROCESS_TEST_OVERRIDDEN", "gateway-value")
	// The server's tracing configuration passes, even a secret-looking name.
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/otel/client.key")

	p := newProcessWith(t, Config{Binary: newProcess(t, t.TempDir()).cfg.Binary, StateDir: t.TempDir(), Isolation: IsolationNone})
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "env")
	spec.Env = map[string]string{
		"SANDBOX_VISIBLE":         "configured",
		"CONFIGURED_API_KEY":      "kept-on-purpose",
		"PROCESS_TEST_OVERRIDDEN": "spec-value",
	}
	info := backendtest.MustCreate(t, p, spec)

	env := map[string]string{}
	for _, kv := range procList(t, pidOf(t, info), "environ") {
		name, value, _ := strings.Cut(kv, "=")
		if _, dup := env[name]; dup {
			t.Errorf("variable %s set twice", name)
		}
		env[name] = value
	}
	for name, want := range map[string]string{
		"SANDBOX_VISIBLE":               "configured",
		"CONFIGURED_API_KEY":            "kept-on-purpose",
		"PROCESS_TEST_OVERRIDDEN":       "spec-value",
		"PROCESS_TEST_PLAIN":            "inherited",
		"OTEL_TRACES_EXPORTER":          "none",
		"OTEL_EXPORTER_OTLP_CLIENT_KEY": "/etc/otel/client.key",
		sandboxspec.KeepEnvVar:          "CONFIGURED_API_KEY,PROCESS_TEST_OVERRIDDEN,SANDBOX_VISIBLE",
	} {
		if env[name] != want {
			t.Errorf("child %s = %q, want %q", name, env[name], want)
		}
	}
	for _, name := range []string{"SANDGATE_TEST_SECRET_TOKEN", "PROCESS_TEST_DB_PASSWORD", "SANDGATE_REDIS_URL"} {
		if v, ok := env[name]; ok {
			t.Errorf("gateway variable %s reached the sandbox (%d bytes)", name, len(v))
		}
	}
	// Values are never logged.
	logData, _ := os.ReadFile(p.logPath(spec.SandboxID))
	if strings.Contains(string(logData), "kept-on-purpose") {
		t.Error("sandbox log holds a configured env value")
	}
}

// An isolated sandbox inherits nothing of the gateway's environment: its
// commands see the configured variables and a PATH and HOME of its own.
// Not parallel: t.Setenv.
func TestIsolatedEnvironment(t *testing.T) {
	t.Setenv("PROCESS_TEST_PLAIN", "gateway-only")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	p := newProcess(t, t.TempDir())
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "isolated-env")
	spec.Env = map[string]string{"SANDBOX_VISIBLE": "configured", "CONFIGURED_API_KEY": "kept-on-purpose"}
	info := backendtest.MustCreate(t, p, spec)
	env := map[string]string{}
	for _, kv := range strings.Split(backendtest.Exec(t, info, "env").Output, "\n") {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = value
	}
	for name, want := range map[string]string{
		"SANDBOX_VISIBLE":    "configured",
		"CONFIGURED_API_KEY": "kept-on-purpose",
		"PATH":               sandboxPath,
		"HOME":               backend.VirtualWorkspace,
	} {
		if env[name] != want {
			t.Errorf("command %s = %q, want %q", name, env[name], want)
		}
	}
	for _, name := range []string{"PROCESS_TEST_PLAIN", "OTEL_TRACES_EXPORTER", sandboxspec.KeepEnvVar} {
		if _, ok := env[name]; ok {
			t.Errorf("gateway variable %s reached an isolated sandbox", name)
		}
	}
}

func TestChildEnvTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		parent     []string
		configured map[string]string
		want       []string
	}{
		{"plain inherited", []string{"HOME=/root", "PATH=/bin"}, nil, []string{"HOME=/root", "PATH=/bin", "SANDGATE_KEEP_ENV="}},
		{"secrets stripped", []string{"AWS_SECRET_ACCESS_KEY=x", "GH_TOKEN=y", "LANG=C"}, nil, []string{"LANG=C", "SANDGATE_KEEP_ENV="}},
		{"gateway settings stripped", []string{"SANDGATE_DATA_DIR=/d", "SANDGATE_KEEP_ENV=EVIL"}, nil, []string{"SANDGATE_KEEP_ENV="}},
		{"configured overrides and is sorted", []string{"A=old", "B=1"}, map[string]string{"Z": "z", "A": "new"},
			[]string{"B=1", "A=new", "Z=z", "SANDGATE_KEEP_ENV=A,Z"}},
		{"configured secret kept", nil, map[string]string{"OPENAI_API_KEY": "k"}, []string{"OPENAI_API_KEY=k", "SANDGATE_KEEP_ENV=OPENAI_API_KEY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := childEnv(tc.parent, tc.configured); !slices.Equal(got, tc.want) {
				t.Errorf("childEnv = %q, want %q", got, tc.want)
			}
		})
	}
}

// An image's variables replace the isolated defaults of the same name and
// join the others; without an image the defaults stand.
func TestIsolatedBase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		image []string
		want  []string
	}{
		{"no image", nil, isolatedEnv},
		{"image PATH and its own", []string{"PATH=/opt/bin:/bin", "LANG_EXTRA=x"},
			[]string{"PATH=/opt/bin:/bin", "LANG_EXTRA=x", "HOME=" + backend.VirtualWorkspace, "LANG=C.UTF-8", "TERM=xterm-256color"}},
		{"a prefix is not a name", []string{"PATHX=1"}, append([]string{"PATHX=1"}, isolatedEnv...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := (Config{SystemEnv: tc.image}).isolatedBase(); !slices.Equal(got, tc.want) {
				t.Errorf("isolatedBase = %q, want %q", got, tc.want)
			}
		})
	}
}

// Shell sessions of the sandbox server run in their own process groups
// (setsid); Destroy must still take them down.
func TestDestroyKillsSessionsOutsideItsGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "session.pid")
	wrapper := filepath.Join(dir, "with-session.sh")
	script := "#!/bin/sh\nsetsid sleep 300 &\necho $! > \"$SESSION_PIDFILE\"\nexec \"$SANDBOX_SERVER\" \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// A wrapper script as the binary: the plain child process (in a jail the
	// whole PID namespace goes with the sandbox anyway).
	p := newProcessWith(t, Config{Binary: wrapper, StateDir: t.TempDir(), Isolation: IsolationNone})
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "max", "sessions")
	spec.Env = map[string]string{"SESSION_PIDFILE": pidFile, "SANDBOX_SERVER": newProcess(t, t.TempDir()).cfg.Binary}
	info := backendtest.MustCreate(t, p, spec)

	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	session, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(session, syscall.SIGKILL) })
	// The background setsid may not have run yet when the server answers.
	backendtest.Eventually(t, "the session leads its own group", func() bool {
		pgid, _ := syscall.Getpgid(session)
		return pgid == session
	})
	pr, found, err := readProc(t.Context(), session)
	if err != nil || !found || pr.PPID != pidOf(t, info) {
		t.Fatalf("session %d is not the sandbox's child: %+v %v %v", session, pr, found, err)
	}
	if err := p.Destroy(backendtest.Ctx(t), info); err != nil {
		t.Fatal(err)
	}
	backendtest.Eventually(t, "the session is gone", func() bool { ok, _ := live(t.Context(), session, pr.Start); return !ok })
}
