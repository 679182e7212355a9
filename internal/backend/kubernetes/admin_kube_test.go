package kubernetes

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// cpuTicks is utime+stime of a host process and its state letter.
func cpuTicks(t *testing.T, pid int) (uint64, string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "gone"
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s, f[0]
}

// TestFreezeStatsLogsOnTheRealNode: with Sandgate's server in its Pods the
// backend freezes a sandbox's commands (their CPU ticks, read on the host,
// stand still for 5 s) and thaws them, measures it, and streams its log
// from the kubelet.
func TestFreezeStatsLogsOnTheRealNode(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	be := e.backend(t, e.config()).Backend()
	fz, ok := be.(backend.Freezer)
	if !ok {
		t.Fatal("with kubernetes_server set the backend is no Freezer")
	}
	st, ok := be.(backend.Statter)
	if !ok {
		t.Fatal("with kubernetes_server set the backend is no Statter")
	}
	info := backendtest.MustCreate(t, be, spec("grace", "t"))
	backendtest.Exec(t, info, "setsid sh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null &")

	var burners []int
	backendtest.Eventually(t, "the burner runs", func() bool {
		burners = burners[:0]
		for _, pid := range e.node.Pids(t, info.Incarnation) {
			if ticks, state := cpuTicks(t, pid); state == "R" && ticks > 0 {
				burners = append(burners, pid)
			}
		}
		return len(burners) > 0
	})
	stats, err := st.Stats(backendtest.Ctx(t), info)
	if err != nil || stats.CPUSeconds <= 0 || stats.MemoryBytes <= 0 || stats.PIDs < 2 {
		t.Errorf("Stats = %+v, %v", stats, err)
	}

	if err := fz.Freeze(backendtest.Ctx(t), info); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	before := map[int]uint64{}
	for _, pid := range burners {
		ticks, state := cpuTicks(t, pid)
		if state != "T" {
			t.Errorf("burner %d in state %s after Freeze, want T", pid, state)
		}
		before[pid] = ticks
	}
	time.Sleep(5 * time.Second)
	for pid, was := range before {
		if now, _ := cpuTicks(t, pid); now != was {
			t.Errorf("burner %d used CPU while frozen: %d -> %d ticks", pid, was, now)
		}
	}
	if got := backendtest.Status(t, info.URL, info.Secret); got != 200 {
		t.Errorf("the frozen sandbox's server answers %d, want 200", got)
	}
	if err := fz.Thaw(backendtest.Ctx(t), info); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	backendtest.Eventually(t, "the burner runs again", func() bool {
		for pid, was := range before {
			if now, _ := cpuTicks(t, pid); now > was {
				return true
			}
		}
		return false
	})

	rc, err := be.(backend.LogStreamer).Logs(backendtest.Ctx(t), info, backend.LogOptions{Tail: 50})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	logs, _ := io.ReadAll(rc)
	rc.Close()
	if !strings.Contains(string(logs), "listening") {
		t.Errorf("the sandbox's log from the kubelet lacks the server's start:\n%s", logs)
	}
}

// TestLeftoversOnTheRealNode: a crashed sandbox's Pod and a Secret no Pod
// holds are leftovers, removed on request; a running sandbox's are not.
func TestLeftoversOnTheRealNode(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	k.orphanGrace = 0
	live := backendtest.MustCreate(t, k, spec("henry", "live"))
	crashed := backendtest.MustCreate(t, k, spec("henry", "crashed"))
	e.node.Crash(t, crashed.Incarnation)
	backendtest.Eventually(t, "the crashed pod is Failed", func() bool {
		pod, _ := e.pod(t, podName(crashed.SandboxID))
		return pod != nil && pod.Status.Phase == corev1.PodFailed
	})
	orphan := secretFor(podName(live.SandboxID)+"-0rphan00", map[string]string{
		backend.LabelManagedBy: backend.ManagedByValue, backend.LabelSandboxID: live.SandboxID,
	}, "x")
	if _, err := e.api.Admin.CoreV1().Secrets(e.ns).Create(t.Context(), orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	left, err := k.Leftovers(backendtest.Ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"pod " + podName(crashed.SandboxID): true, "secret " + orphan.Name: true}
	got := map[string]bool{}
	for _, l := range left {
		got[l.Kind+" "+l.Name] = true
		if err := k.RemoveLeftover(backendtest.Ctx(t), l); err != nil {
			t.Errorf("RemoveLeftover(%+v): %v", l, err)
		}
	}
	for w := range want {
		if !got[w] {
			t.Errorf("leftovers %v lack %s", got, w)
		}
	}
	for g := range got {
		if !want[g] {
			t.Errorf("%s is not a leftover (running sandbox's)", g)
		}
	}
	if _, err := e.api.Admin.CoreV1().Secrets(e.ns).Get(t.Context(), orphan.Name, metav1.GetOptions{}); err == nil {
		t.Error("the orphan secret is still there")
	}
	if got := backendtest.Status(t, live.URL, live.Secret); got != 200 {
		t.Errorf("the live sandbox after prune: %d", got)
	}
}

// TestOnEndedSeesADeletion: the informer tells the pool the moment a Pod
// is deleted behind the backend's back, before its containers stop.
func TestOnEndedSeesADeletion(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	ended := make(chan [2]string, 16)
	k.OnEnded(func(sid, inc string) { ended <- [2]string{sid, inc} })
	info := backendtest.MustCreate(t, k, spec("ivan", "t"))
	if err := e.api.Admin.CoreV1().Pods(e.ns).Delete(t.Context(), podName(info.SandboxID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ended:
		if got != [2]string{info.SandboxID, info.Incarnation} {
			t.Errorf("OnEnded(%v), want %s %s", got, info.SandboxID, info.Incarnation)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no OnEnded after the Pod's deletion")
	}
}

// TestRestrictedPodLimitsOnTheRealNode: the namespace enforces the
// restricted Pod Security Standard (a Pod spec without runAsNonRoot is
// refused at admission), and the sandbox Pod's memory limit is the
// kernel's: a hog is OOM-killed in its cgroup, the sandbox lives on.
func TestRestrictedPodLimitsOnTheRealNode(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	loose := e.config()
	loose.RunAsNonRoot, loose.RunAsUser = false, 0
	if _, err := e.backend(t, loose).Create(backendtest.Ctx(t), spec("judy", "loose")); err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Fatalf("Create of a Pod that may run as root: %v, want refused by PodSecurity", err)
	}

	cfg := e.config()
	cfg.MemoryRequest, cfg.MemoryLimit = "32Mi", "64Mi"
	k := e.backend(t, cfg)
	info := backendtest.MustCreate(t, k, spec("judy", "hog"))
	began := time.Now()
	res := backendtest.Exec(t, info, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
	took := time.Since(began)
	if strings.Contains(res.Output, "survived") || res.ExitCode == 0 {
		t.Fatalf("a 200 MB hog under a 64 MiB limit: exit %v, output %q", res.ExitCode, res.Output)
	}
	if got := backendtest.Status(t, info.URL, info.Secret); got != 200 {
		t.Errorf("the sandbox after its hog was killed: %d", got)
	}
	// The kernel's account of the container's memory cgroup (v1 here).
	peakBytes, oom := e.node.MemoryCgroup(t, info.Incarnation)
	if peakBytes == 0 || peakBytes > 64<<20 || !strings.Contains(oom, "oom_kill ") || strings.Contains(oom, "oom_kill 0") {
		t.Errorf("memory cgroup: peak %d bytes (limit %d), oom_control %q", peakBytes, 64<<20, oom)
	}
	t.Logf("hog OOM-killed after %v; container peak %d bytes of a %d limit", took.Round(time.Millisecond), peakBytes, 64<<20)
}
