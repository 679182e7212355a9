package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
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
	"github.com/sandgate/sandgate/internal/testutil"
)

func TestCreateServesAndMapsThreadDirs(t *testing.T) {
	t.Parallel()
	stateDir, dataDir, skills := t.TempDir(), t.TempDir(), t.TempDir()
	// The plain child: a loopback port, and the thread's dirs mapped by
	// rewriting (isolated, they are bind-mounted: the contract and the e2e
	// isolation tests).
	p := newProcessWith(t, Config{Binary: testutil.GatewayBinary(t), StateDir: stateDir, Instance: "test", Isolation: IsolationNone})
	mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: dataDir, SkillsDir: skills}, "alice", "t1")
	if err != nil {
		t.Fatal(err)
	}
	spec := backend.Spec{SandboxID: identity.SandboxID("alice", "t1"), User: "alice", Thread: "t1", Mounts: mounts,
		Labels: map[string]string{"team": "x"}}
	info := backendtest.MustCreate(t, p, spec)

	resp, err := http.Get(info.URL + "/v1/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), backend.VirtualWorkspace) {
		t.Fatalf("GET /v1/sandbox = %d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(info.URL, "http://127.0.0.1:") {
		t.Errorf("URL %q not on loopback", info.URL)
	}
	for _, sub := range []string{"workspace", "uploads", "outputs"} {
		if fi, err := os.Stat(filepath.Join(backend.ThreadDir(dataDir, "alice", "t1"), sub)); err != nil || !fi.IsDir() {
			t.Errorf("thread dir %s missing: %v", sub, err)
		}
	}

	pid := pidOf(t, info)
	args := procList(t, pid, "cmdline")
	ws := filepath.Join(backend.ThreadDir(dataDir, "alice", "t1"), "workspace")
	for _, want := range [][]string{
		{"sandbox", "--listen-fd", "3", "--recorded-fd", "4", "--home", backend.VirtualWorkspace},
		{"--map", backend.VirtualWorkspace + "=" + ws},
		{"--map-ro", backend.VirtualSkills + "=" + skills},
	} {
		if !backendtest.ContainsRun(args, want) {
			t.Errorf("child args %q lack %q", args, want)
		}
	}
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("child pgid = %d, %v; want its own group %d", pgid, err, pid)
	}

	pr, found, err := readProc(context.Background(), pid)
	if err != nil || !found {
		t.Fatalf("readProc: %v %v", found, err)
	}
	if info.Incarnation != strconv.Itoa(pid)+"-"+pr.Start {
		t.Errorf("incarnation %q, want pid-starttime %d-%s", info.Incarnation, pid, pr.Start)
	}
	if info.Backend != Name || info.SandboxID != spec.SandboxID || info.Thread != "t1" || info.User != "alice" || info.CreatedAt.IsZero() {
		t.Errorf("info = %+v", info)
	}
	for k, v := range map[string]string{
		backend.LabelManagedBy: backend.ManagedByValue, backend.LabelSandboxID: spec.SandboxID,
		backend.LabelThread: "t1", backend.LabelUser: "alice", backend.LabelInstance: "test", "team": "x",
	} {
		if info.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, info.Labels[k], v)
		}
	}

	var st state
	data, err := os.ReadFile(filepath.Join(stateDir, spec.SandboxID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.PID != pid || st.StartTime != pr.Start || st.URL != info.URL || st.Thread != "t1" {
		t.Errorf("state file = %+v", st)
	}
	logData, _ := os.ReadFile(filepath.Join(stateDir, spec.SandboxID+".log"))
	if !strings.Contains(string(logData), "starting sandbox "+spec.SandboxID) {
		t.Errorf("log lacks start marker: %q", logData)
	}
}

func TestExternalKillIsNoticed(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := newProcess(t, stateDir)
	info := backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "dave", "t"))
	if err := syscall.Kill(pidOf(t, info), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	backendtest.Eventually(t, "Alive is false", func() bool {
		ok, err := p.Alive(backendtest.Ctx(t), info)
		return err == nil && !ok
	})
	if _, found, err := p.Discover(backendtest.Ctx(t), info.SandboxID); err != nil || found {
		t.Fatalf("Discover after kill = %v, %v", found, err)
	}
	for _, ext := range []string{".json", ".lock"} {
		if fileExists(filepath.Join(stateDir, info.SandboxID+ext)) {
			t.Errorf("%s file of dead sandbox left behind", ext)
		}
	}
	// The crash log stays for the post-mortem.
	if !fileExists(filepath.Join(stateDir, info.SandboxID+".log")) {
		t.Error("log of crashed sandbox removed")
	}
}

func TestDestroyTwice(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := newProcess(t, stateDir)
	info := backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "erin", "t"))
	pid := pidOf(t, info)
	for i := range 2 {
		if err := p.Destroy(backendtest.Ctx(t), info); err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
	}
	if exists(pid) {
		t.Errorf("sandbox pid %d still exists after Destroy", pid)
	}
	if err := syscall.Kill(-pid, 0); err != syscall.ESRCH {
		t.Errorf("process group %d still exists: %v", pid, err)
	}
	if ok, err := p.Alive(backendtest.Ctx(t), info); err != nil || ok {
		t.Errorf("Alive after Destroy = %v, %v", ok, err)
	}
	entries := sandboxFiles(t, stateDir)
	if len(entries) != 0 {
		t.Errorf("state dir not empty after Destroy: %v", entries)
	}
	// Destroying by id alone, with nothing left, is nil as well.
	if err := p.Destroy(backendtest.Ctx(t), backend.Info{SandboxID: info.SandboxID}); err != nil {
		t.Errorf("Destroy of unknown sandbox: %v", err)
	}
}

func TestListReturnsLiveOnly(t *testing.T) {
	t.Parallel()
	stateDir, dataDir := t.TempDir(), t.TempDir()
	p := newProcess(t, stateDir)
	var live []backend.Info
	for _, thread := range []string{"a", "b", "c"} {
		live = append(live, backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: dataDir}, "gina", thread)))
	}
	killed := live[1]
	live = slices.Delete(live, 1, 2)
	if err := syscall.Kill(pidOf(t, killed), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	backendtest.Eventually(t, "killed sandbox is dead", func() bool { ok, _ := p.Alive(backendtest.Ctx(t), killed); return !ok })

	// Files that are not sandbox state are ignored; a stale one is dropped.
	_ = os.WriteFile(filepath.Join(stateDir, "notes.txt"), []byte("x"), 0o600)
	_ = os.WriteFile(filepath.Join(stateDir, "NOT-AN-ID.json"), []byte("{}"), 0o600)
	stale := exitedProcessState(t, identity.SandboxID("gina", "stale"))
	if err := p.writeState(stale); err != nil {
		t.Fatal(err)
	}

	got, err := p.List(backendtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs, wantIDs []string
	for _, i := range got {
		gotIDs = append(gotIDs, i.SandboxID+"/"+i.Incarnation)
	}
	for _, i := range live {
		wantIDs = append(wantIDs, i.SandboxID+"/"+i.Incarnation)
	}
	slices.Sort(gotIDs)
	slices.Sort(wantIDs)
	if !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("List = %v, want %v", gotIDs, wantIDs)
	}
	for _, sid := range []string{killed.SandboxID, stale.SandboxID} {
		if fileExists(filepath.Join(stateDir, sid+".json")) {
			t.Errorf("stale state %s not removed by List", sid)
		}
	}
}

// exitedProcessState is the state of a sandbox whose process has exited.
func exitedProcessState(t *testing.T, sid string) *state {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	return &state{SandboxID: sid, URL: "http://127.0.0.1:1", PID: pid, StartTime: "1",
		Incarnation: incarnation(pid, "1"), CreatedAt: time.Now()}
}

// A state file naming a live pid with another start time is a recycled pid:
// it is not the sandbox, and nothing may signal it.
func TestRecycledPidIsNeverKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		destroy func(info backend.Info) backend.Info
	}{
		{"by incarnation", func(info backend.Info) backend.Info { return info }},
		{"by id only", func(info backend.Info) backend.Info { return backend.Info{SandboxID: info.SandboxID} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stateDir := t.TempDir()
			p := newProcess(t, stateDir)
			victim := exec.Command("sleep", "60")
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
			pid := victim.Process.Pid
			pr, found, err := readProc(context.Background(), pid)
			if err != nil || !found {
				t.Fatalf("readProc: %v %v", found, err)
			}
			start, _ := strconv.Atoi(pr.Start)
			wrong := strconv.Itoa(start + 1)
			st := &state{SandboxID: identity.SandboxID("hank", tc.name), URL: "http://127.0.0.1:1", PID: pid, StartTime: wrong,
				Incarnation: incarnation(pid, wrong), CreatedAt: time.Now()}
			if err := p.writeState(st); err != nil {
				t.Fatal(err)
			}
			info := st.info()
			if ok, err := p.Alive(backendtest.Ctx(t), info); err != nil || ok {
				t.Fatalf("Alive of recycled pid = %v, %v", ok, err)
			}
			if err := p.Destroy(backendtest.Ctx(t), tc.destroy(info)); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if ok, err := live(context.Background(), pid, pr.Start); err != nil || !ok {
				t.Fatalf("Destroy killed the unrelated process %d (%v)", pid, err)
			}
			if fileExists(p.statePath(st.SandboxID)) {
				t.Error("state of the dead sandbox not removed")
			}
			// Discover must not adopt it either.
			if err := p.writeState(st); err != nil {
				t.Fatal(err)
			}
			if _, found, err := p.Discover(backendtest.Ctx(t), st.SandboxID); err != nil || found {
				t.Fatalf("Discover of recycled pid = %v, %v", found, err)
			}
			if ok, _ := live(context.Background(), pid, pr.Start); !ok {
				t.Fatal("Discover killed the unrelated process")
			}
		})
	}
}

func TestInvalidInputRejected(t *testing.T) {
	t.Parallel()
	p := newProcess(t, t.TempDir())
	valid := identity.SandboxID("ivy", "t")
	for _, sid := range []string{"", "abc", valid + "0", strings.ToUpper(valid), "../../../etc/pa", "0123456789abcde/", "0123456789abcdeg"} {
		t.Run("id "+sid, func(t *testing.T) {
			t.Parallel()
			if _, err := p.Create(backendtest.Ctx(t), backend.Spec{SandboxID: sid}); err == nil {
				t.Error("Create accepted it")
			}
			if _, _, err := p.Discover(backendtest.Ctx(t), sid); err == nil {
				t.Error("Discover accepted it")
			}
			if err := p.Destroy(backendtest.Ctx(t), backend.Info{SandboxID: sid}); err == nil {
				t.Error("Destroy accepted it")
			}
		})
	}
	for _, tc := range []struct {
		name string
		spec backend.Spec
	}{
		// backend.TestValidateSpec has the rest; these show both checks run.
		{"relative mount", backend.Spec{SandboxID: valid, Mounts: []backend.Mount{{HostPath: "/tmp", ContainerPath: "mnt/x"}}}},
		{"mount with =", backend.Spec{SandboxID: valid, Mounts: []backend.Mount{{HostPath: "/tmp", ContainerPath: "/mnt/a=b"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := p.Create(backendtest.Ctx(t), tc.spec); err == nil {
				t.Error("Create accepted it")
			}
		})
	}
	if ok, err := p.Alive(backendtest.Ctx(t), backend.Info{SandboxID: valid, Incarnation: "container-abc"}); err == nil || ok {
		t.Errorf("Alive of a malformed incarnation = %v, %v", ok, err)
	}
	if entries := sandboxFiles(t, p.cfg.StateDir); len(entries) != 0 {
		t.Errorf("rejected input left files: %v", entries)
	}
}

func TestCreateFailsFastWhenServerExits(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := newProcessWith(t, Config{Binary: "/bin/false", StateDir: stateDir, ReadyTimeout: 30 * time.Second, Isolation: IsolationNone})
	began := time.Now()
	_, err := p.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "jo", "t"))
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Create with an exiting server = %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Create took %v to notice the exit", d)
	}
	for _, ext := range []string{".json", ".lock"} {
		if fileExists(filepath.Join(stateDir, identity.SandboxID("jo", "t")+ext)) {
			t.Errorf("failed create left its %s file", ext)
		}
	}
}

func TestCreateHonoursReadyTimeout(t *testing.T) {
	t.Parallel()
	// A server that never serves: the shell keeps fd 3 open and sleeps.
	stateDir := t.TempDir()
	script := filepath.Join(t.TempDir(), "hang.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := newProcessWith(t, Config{Binary: script, StateDir: stateDir, ReadyTimeout: 300 * time.Millisecond, Isolation: IsolationNone})
	began := time.Now()
	if _, err := p.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "kim", "t")); err == nil {
		t.Fatal("Create of a server that never answers succeeded")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Create took %v with a 300ms ready timeout", d)
	}
	if fileExists(filepath.Join(stateDir, identity.SandboxID("kim", "t")+".json")) {
		t.Error("timed-out create left its state")
	}
	if got, _ := p.List(backendtest.Ctx(t)); len(got) != 0 {
		t.Errorf("List after failed create = %v", got)
	}
}

// A sandbox that is alive but does not answer (here: stopped) is not
// adopted by Discover, nor killed by it; Create replaces it only after its
// full ready timeout.
func TestUnresponsiveSandboxIsReplacedOnlyByCreate(t *testing.T) {
	t.Parallel()
	stateDir, dataDir := t.TempDir(), t.TempDir()
	p := newProcess(t, stateDir)
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: dataDir}, "nia", "hung")
	hung := backendtest.MustCreate(t, p, spec)
	pid := pidOf(t, hung)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	backendtest.Eventually(t, "the sandbox is stopped", func() bool {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		return len(f) > 0 && f[0] == "T"
	})

	if _, found, err := p.Discover(backendtest.Ctx(t), spec.SandboxID); err != nil || found {
		t.Fatalf("Discover of a hung sandbox = %v, %v", found, err)
	}
	if ok, _ := p.Alive(backendtest.Ctx(t), hung); !ok {
		t.Fatal("Discover killed the hung sandbox")
	}
	if !fileExists(p.statePath(spec.SandboxID)) {
		t.Fatal("Discover removed the state of a live sandbox")
	}

	// Short enough to give up on the hung one soon, long enough for a new
	// sandbox to start on a busy machine.
	impatient := newProcessWith(t, Config{Binary: p.cfg.Binary, StateDir: stateDir, ReadyTimeout: 3 * time.Second})
	fresh := backendtest.MustCreate(t, impatient, spec)
	if fresh.Incarnation == hung.Incarnation {
		t.Fatal("Create adopted the hung sandbox")
	}
	if backendtest.Status(t, fresh.URL, "") != http.StatusOK {
		t.Fatal("replacement does not answer")
	}
	backendtest.Eventually(t, "the hung sandbox is gone", func() bool { return !exists(pid) })
}

// A gateway killed between spawning a sandbox and writing its state file
// (its end of the recorded pipe closes with it) must not leave a server
// nobody can find: the child exits by itself, so the next create makes the
// only one. Found by the soak (a duplicate after kill -9 mid-create).
func TestUnrecordedChildExitsWhenItsCreatorDies(t *testing.T) {
	t.Parallel()
	p := newProcess(t, t.TempDir())
	spec := backend.Spec{SandboxID: identity.SandboxID("alice", "orphan"), User: "alice", Thread: "orphan"}
	c, url, err := p.start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := backend.WaitReady(backendtest.Ctx(t), url); err != nil {
		t.Fatalf("child never served: %v", err)
	}
	_ = c.recorded.Close() // what the kernel does when the creator dies
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		signalGroup(c.pid, syscall.SIGKILL)
		t.Fatal("an unrecorded sandbox server kept running after its creator's end of the pipe closed")
	}
	if _, ok, _ := p.Discover(context.Background(), spec.SandboxID); ok {
		t.Fatal("Discover found a sandbox that was never recorded")
	}
}

// A create whose caller gives up after the sandbox is recorded (its lock
// lost to a Redis flush, say) leaves a sandbox that comes up running and
// recorded: another replica may already have discovered and be serving it.
// Found by the soak (a serving sandbox killed by its creator's abandon).
func TestCancelledCreateLeavesARecordedSandboxForAdoption(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	script := filepath.Join(t.TempDir(), "slow.sh")
	body := "#!/bin/sh\nsleep 1\nexec " + testutil.GatewayBinary(t) + ` "$@"` + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	p := newProcessWith(t, Config{Binary: script, StateDir: stateDir, Instance: "test", Isolation: IsolationNone})
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "flushed")
	ctx, cancel := context.WithCancel(backendtest.Ctx(t))
	go func() { // give up as soon as the sandbox is recorded
		for !fileExists(filepath.Join(stateDir, spec.SandboxID+".json")) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	if _, err := p.Create(ctx, spec); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with its context cancelled after recording: %v, want context.Canceled", err)
	}
	info, ok, err := p.Discover(backendtest.Ctx(t), spec.SandboxID)
	if err != nil || !ok {
		t.Fatalf("the recorded sandbox was not left for adoption: found=%v err=%v", ok, err)
	}
	t.Cleanup(func() { _ = p.Destroy(context.Background(), info) })
	if alive, err := p.Alive(backendtest.Ctx(t), info); err != nil || !alive {
		t.Fatalf("adopted sandbox not alive: %v %v", alive, err)
	}
}
