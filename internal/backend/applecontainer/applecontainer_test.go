package applecontainer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// newWithStandIn returns a backend driving a fresh stand-in CLI.
func newWithStandIn(t *testing.T, old bool) (*AppleContainer, string, *testutil.LogBuffer) {
	t.Helper()
	bin := newFakeCLI(t, fakeSettings{Server: testutil.SandboxBinary(t), Old: old})
	logs := &testutil.LogBuffer{}
	return newApple(t, standInConfig(t, bin), logs), bin, logs
}

func standInConfig(t *testing.T, bin string) Config {
	return Config{Binary: bin, Image: "sandgate-sandbox:latest", ContainerPrefix: "sgt", Port: testutil.FreePort(t),
		Memory: 2 << 30, CPUs: 2, CapAdd: []string{"CHOWN"}, Instance: "test", ReadyTimeout: 20 * time.Second}
}

func newApple(t *testing.T, cfg Config, logs *testutil.LogBuffer) *AppleContainer {
	t.Helper()
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), logs), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestContract runs the shared contract against the stand-in CLI (the
// only `container` there is on Linux); instances share the CLI and config.
func TestContract(t *testing.T) {
	t.Parallel()
	cfg := standInConfig(t, newFakeCLI(t, fakeSettings{Server: testutil.SandboxBinary(t)}))
	backendtest.Run(t, backendtest.Harness{
		Name:          Name,
		BindsHostDirs: true,
		Instance:      cfg.Instance,
		New:           func(t *testing.T) backend.Backend { return newApple(t, cfg, &testutil.LogBuffer{}) },
		NoSecret:      true, // the server gets no secret channel: the shared key applies
	})
}

func runCalls(calls [][]string) [][]string {
	var out [][]string
	for _, c := range calls {
		if len(c) > 1 && c[0] == "run" && c[1] != "--help" {
			out = append(out, c)
		}
	}
	return out
}

func TestRunArgs(t *testing.T) {
	t.Parallel()
	a := &AppleContainer{cfg: Config{Image: "img:1", ContainerPrefix: "sg", Port: 9000, Memory: 3 << 29, CPUs: 2,
		CapAdd: []string{"CHOWN", "SETUID"}, Instance: "gw"}, user: "501:20"}
	spec := backend.Spec{SandboxID: "0123456789abcdef", User: "u", Thread: "t",
		Mounts: []backend.Mount{{HostPath: "/h/ws", ContainerPath: backend.VirtualWorkspace}, {HostPath: "/h/sk", ContainerPath: backend.VirtualSkills, ReadOnly: true}},
		Env:    map[string]string{"API_KEY": "topsecret"}, Labels: map[string]string{"team": "x"}}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	args := a.runArgs(spec, "/tmp/env", "nonce1", created, features{capDrop: true, init: true})
	for _, want := range [][]string{
		{"run", "--detach", "--rm", "--name", "sg-0123456789abcdef"},
		{"--label", backend.LabelSandboxID + "=0123456789abcdef"},
		{"--label", backend.LabelInstance + "=gw"},
		{"--label", LabelIncarnation + "=nonce1"},
		{"--label", labelCreated + "=2026-01-02T03:04:05Z"},
		{"--label", "team=x"},
		{"--env-file", "/tmp/env"},
		{"--mount", "type=bind,source=/h/ws,target=" + backend.VirtualWorkspace},
		{"--mount", "type=bind,source=/h/sk,target=" + backend.VirtualSkills + ",readonly"},
		{"--user", "501:20"}, {"--cpus", "2"}, {"--memory", "1536M"},
		{"--cap-drop", "ALL", "--cap-add", "CHOWN", "--cap-add", "SETUID", "--init"},
		{"--entrypoint", sandboxspec.ServerImagePath, "img:1", "sandbox", "--listen", "0.0.0.0:9000", "--home", backend.VirtualWorkspace},
	} {
		if !backendtest.ContainsRun(args, want) {
			t.Errorf("args lack %q:\n%q", want, args)
		}
	}
	if strings.Contains(strings.Join(args, " "), "topsecret") {
		t.Error("an env value is on the command line")
	}
	old := a.runArgs(spec, "/tmp/env", "n", created, features{})
	if slices.Contains(old, "--cap-drop") || slices.Contains(old, "--init") {
		t.Errorf("flags the CLI lacks: %q", old)
	}
	spec.Template = backend.Template{Name: "py", Image: "python:3", Memory: 256 << 20}
	templated := a.runArgs(spec, "/tmp/env", "n", created, features{})
	for _, want := range [][]string{
		{"--label", backend.LabelTemplate + "=py"}, {"--memory", "256M"},
		{"--entrypoint", sandboxspec.ServerImagePath, "python:3", "sandbox"},
	} {
		if !backendtest.ContainsRun(templated, want) {
			t.Errorf("templated args lack %q:\n%q", want, templated)
		}
	}
	if slices.Contains(templated, "img:1") || slices.Contains(templated, "1536M") {
		t.Errorf("templated args keep the configured image or memory:\n%q", templated)
	}
	spec.Template = backend.Template{}
	want := "API_KEY=topsecret\nHOME=" + backend.VirtualWorkspace + "\n" + sandboxspec.KeepEnvVar + "=API_KEY\n"
	if got := envFile(spec.Env); got != want {
		t.Errorf("env file %q, want %q", got, want)
	}
	for _, bad := range []backend.Spec{
		{SandboxID: "0123456789abcdef", Env: map[string]string{"A": "two\nlines"}},
		{SandboxID: "0123456789abcdef", Mounts: []backend.Mount{{HostPath: "/a,b", ContainerPath: "/x"}}},
		{SandboxID: "nope"},
	} {
		if validateSpec(bad) == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

func TestLifecycleWithStandInCLI(t *testing.T) {
	t.Parallel()
	a, bin, logs := newWithStandIn(t, false)
	ctx := backendtest.Ctx(t)
	dataDir := t.TempDir()
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: dataDir, SkillsDir: t.TempDir()}, "alice", "t1")
	spec.Env = map[string]string{"API_KEY": "topsecret-77"}

	info, err := a.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !strings.HasPrefix(info.URL, "http://127.") || strings.HasPrefix(info.URL, "http://127.0.0.1:") || info.Incarnation == "" ||
		info.Backend != Name || info.Thread != "t1" || info.User != "alice" || info.CreatedAt.IsZero() {
		t.Fatalf("info %+v: want the container's own address", info)
	}
	resp, err := http.Get(info.URL + "/v1/sandbox")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/sandbox: %v", err)
	}
	resp.Body.Close()

	runs := runCalls(fakeCalls(t, bin))
	if len(runs) != 1 {
		t.Fatalf("%d run calls", len(runs))
	}
	ws := filepath.Join(backend.ThreadDir(dataDir, "alice", "t1"), "workspace")
	me := strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())
	for _, want := range [][]string{
		{"run", "--detach", "--rm", "--name", "sgt-" + spec.SandboxID},
		{"--mount", "type=bind,source=" + ws + ",target=" + backend.VirtualWorkspace},
		{"--user", me}, {"--cpus", "2"}, {"--memory", "2048M"},
		{"--cap-drop", "ALL", "--cap-add", "CHOWN", "--init"},
		{"--entrypoint", sandboxspec.ServerImagePath, "sandgate-sandbox:latest", "sandbox", "--listen", "0.0.0.0:" + strconv.Itoa(a.cfg.Port)},
	} {
		if !backendtest.ContainsRun(runs[0], want) {
			t.Errorf("run lacks %q:\n%q", want, runs[0])
		}
	}
	// The env file: private, complete, and gone after the run.
	var st fakeContainer
	data, _ := os.ReadFile(statePath(filepath.Dir(bin), "sgt-"+spec.SandboxID))
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.EnvMode != 0o600 || !slices.Contains(st.Env, "API_KEY=topsecret-77") || !slices.Contains(st.Env, sandboxspec.KeepEnvVar+"=API_KEY") {
		t.Errorf("env file mode %o, env %q", st.EnvMode, st.Env)
	}
	envPath := runs[0][slices.Index(runs[0], "--env-file")+1]
	if _, err := os.Stat(envPath); !os.IsNotExist(err) {
		t.Errorf("env file %s left behind: %v", envPath, err)
	}
	callsRaw, _ := os.ReadFile(filepath.Join(filepath.Dir(bin), "calls.jsonl"))
	if strings.Contains(string(callsRaw), "topsecret-77") || strings.Contains(logs.String(), "topsecret-77") {
		t.Error("an env value reached a command line or the log")
	}

	// Another create adopts the container without running one (the
	// contract has the rest of the lifecycle).
	again, err := a.Create(ctx, spec)
	if err != nil || again.Incarnation != info.Incarnation || len(runCalls(fakeCalls(t, bin))) != 1 {
		t.Fatalf("second Create: %+v %v", again, err)
	}
	if ok, _ := a.Alive(ctx, backend.Info{SandboxID: info.SandboxID, Incarnation: "another"}); ok {
		t.Fatal("another incarnation counted as alive")
	}

	if err := a.Destroy(ctx, info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	var stopped bool
	for _, c := range fakeCalls(t, bin) {
		stopped = stopped || slices.Equal(c, []string{"stop", "--time", "5", "sgt-" + spec.SandboxID})
	}
	if !stopped {
		t.Error("Destroy did not stop with a grace period")
	}
}

func TestOldCLIAndDeadContainer(t *testing.T) {
	t.Parallel()
	a, bin, logs := newWithStandIn(t, true)
	ctx := backendtest.Ctx(t)
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "bob", "old")
	first, err := a.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	run := runCalls(fakeCalls(t, bin))[0]
	if slices.Contains(run, "--cap-drop") || slices.Contains(run, "--init") {
		t.Errorf("flags this CLI lacks: %q", run)
	}
	if !strings.Contains(logs.String(), "no --cap-drop") {
		t.Error("no warning about the missing --cap-drop")
	}
	// The sandbox dies: not alive, not discovered, replaced on Create.
	var st fakeContainer
	data, _ := os.ReadFile(statePath(filepath.Dir(bin), "sgt-"+spec.SandboxID))
	_ = json.Unmarshal(data, &st)
	_ = syscall.Kill(-st.PID, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for ok, _ := a.Alive(ctx, first); ok; ok, _ = a.Alive(ctx, first) {
		if time.Now().After(deadline) {
			t.Fatal("killed sandbox still alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok, err := a.Discover(ctx, spec.SandboxID); ok || err != nil {
		t.Fatalf("Discover of a dead sandbox = %v %v", ok, err)
	}
	second, err := a.Create(ctx, spec)
	if err != nil || second.Incarnation == first.Incarnation {
		t.Fatalf("not replaced: %+v %v", second, err)
	}
}

func TestForeignContainerNameIsRefused(t *testing.T) {
	t.Parallel()
	a, bin, _ := newWithStandIn(t, false)
	ctx := backendtest.Ctx(t)
	sid := identity.SandboxID("carol", "x")
	// A running container under the name, without Sandgate's labels (its
	// "process" is this test, which is certainly alive).
	foreign, _ := json.Marshal(fakeContainer{ID: "sgt-" + sid, Labels: map[string]string{"app": "mine"}, IP: "127.9.9.9", PID: os.Getpid()})
	if err := os.WriteFile(statePath(filepath.Dir(bin), "sgt-"+sid), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(statePath(filepath.Dir(bin), "sgt-"+sid)) }) // the fake's cleanup must not kill us
	if _, err := a.Create(ctx, backend.Spec{SandboxID: sid, User: "carol", Thread: "x"}); err == nil || !strings.Contains(err.Error(), "did not make") {
		t.Errorf("Create over a foreign container: %v", err)
	}
	if err := a.Destroy(ctx, backend.Info{SandboxID: sid}); err == nil {
		t.Error("Destroy accepted a foreign container")
	}
	if _, ok, _ := a.Discover(ctx, sid); ok {
		t.Error("Discover adopted a foreign container")
	}
	if _, err := os.Stat(statePath(filepath.Dir(bin), "sgt-"+sid)); err != nil {
		t.Error("the foreign container was removed")
	}
}

// Found on PATH by name, as `backend: auto` looks for it.
func TestVersionOnPATH(t *testing.T) {
	bin := newFakeCLI(t, fakeSettings{})
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	v, err := Version(context.Background(), "container")
	if err != nil || !strings.Contains(v, "container CLI version") {
		t.Fatalf("Version = %q %v", v, err)
	}
	a, err := New(Config{Image: "i", ContainerPrefix: "p"}, nil)
	if err != nil || a.bin != bin {
		t.Fatalf("New found %q (%v), want %s", a.bin, err, bin)
	}
	if err := a.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
