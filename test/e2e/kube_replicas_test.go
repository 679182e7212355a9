package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// TestKubernetesTwoReplicasMakeOnePodPerThread sends 20 concurrent first
// requests for each of three threads, alternating between two gateway
// replicas, on the real node: every request is answered by its thread's
// sandbox, and a watch opened before the first sees exactly one Pod made
// per thread.
func TestKubernetesTwoReplicasMakeOnePodPerThread(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	f := newFleet(t, c.flags(t)...)
	replicas := []*gateway{f.start(), f.start()}

	w, err := c.api.Admin.CoreV1().Pods(c.ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: backend.LabelManagedBy + "=" + backend.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	added := map[string]int{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added {
				if m, ok := ev.Object.(metav1.Object); ok {
					mu.Lock()
					added[m.GetName()]++
					mu.Unlock()
				}
			}
		}
	}()

	threads := []string{"r1", "r2", "r3"}
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for _, thread := range threads {
		for i := range 20 {
			wg.Go(func() {
				g := replicas[i%2]
				code, body, _ := call(t, "POST", g.URL+"/threads/"+thread+"/v1/shell/exec", map[string]any{"command": "echo " + thread})
				if code != 200 || !strings.Contains(string(body), thread) {
					errs <- fmt.Errorf("thread %s via %s: %d %s", thread, g.URL, code, body)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	time.Sleep(time.Second) // the watch's last events
	w.Stop()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	for _, thread := range threads {
		name := "sandgate-sandbox-" + identity.SandboxID("default", thread)
		if added[name] != 1 {
			t.Errorf("thread %s: %d Pods made, want 1 (all: %v)", thread, added[name], added)
		}
	}
	if len(added) != len(threads) {
		t.Errorf("Pods made: %v, want one per thread", added)
	}
}

// TestKubernetesFilesSurviveAPodDeletedBehindTheGateway deletes a thread's
// Pod with the API (kubectl delete, a node drain) while the gateway holds
// its route: the next requests get a new Pod, on the same thread data.
func TestKubernetesFilesSurviveAPodDeletedBehindTheGateway(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	f := newFleet(t, c.flags(t)...)
	g := f.start()
	if d := shell(t, g.URL, "del", "echo kept > /mnt/user-data/workspace/kept.txt && cat /mnt/user-data/workspace/kept.txt"); strings.TrimSpace(d.Output) != "kept" {
		t.Fatalf("exec output %q", d.Output)
	}
	name := "sandgate-sandbox-" + identity.SandboxID("default", "del")
	pods := c.api.Admin.CoreV1().Pods(c.ns)
	old, err := pods.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	// The old Pod's containers may answer until the kubelet has killed them;
	// then the gateway learns of the loss and makes a new Pod.
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := call(t, "POST", g.URL+"/threads/del/v1/shell/exec", map[string]any{"command": "cat /mnt/user-data/workspace/kept.txt"})
		now, err := pods.Get(t.Context(), name, metav1.GetOptions{})
		var env envelope
		var d execData
		if code == 200 && err == nil && now.UID != old.UID && json.Unmarshal(body, &env) == nil && json.Unmarshal(env.Data, &d) == nil {
			if strings.TrimSpace(d.Output) != "kept" {
				t.Errorf("in the new Pod the thread's file reads %q, want kept", d.Output)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new Pod answers after the old one was deleted: %d %s\n%s", code, body, tail(g.logs.String(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubernetesFreezeLogsStatsThroughTheGateway: on the real node, a
// freeze on demand stops the sandbox's commands (a CPU burner's ticks, read
// on the host, stand still for 5 s), the next request thaws it, and the
// admin API's logs and stats answer from the kubelet and the sandbox's
// server.
func TestKubernetesFreezeLogsStatsThroughTheGateway(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	f := newFleet(t, append(c.flags(t), "--cache-ttl", "500ms", "--touch-interval", "200ms")...)
	g := f.start()
	shell(t, g.URL, "kf", "setsid sh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null &")
	sid := identity.SandboxID("default", "kf")
	pod, err := c.api.Admin.CoreV1().Pods(c.ns).Get(t.Context(), "sandgate-sandbox-"+sid, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The state and CPU ticks of the Pod's commands (not its server).
	ticks := func() map[int]string {
		out := map[int]string{}
		for _, pid := range c.node.Pids(t, string(pod.UID)) {
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			state, cpu, ok := procStatOf(pid)
			if !ok || strings.TrimSpace(string(comm)) == "sandgate-sandbo" {
				continue
			}
			out[pid] = fmt.Sprintf("%c %d", state, cpu) // state, utime+stime
		}
		return out
	}
	burning := func() bool {
		for _, s := range ticks() {
			if strings.HasPrefix(s, "R ") {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(20 * time.Second)
	for !burning() {
		if time.Now().After(deadline) {
			t.Fatalf("no burner runs in the Pod: %v", ticks())
		}
		time.Sleep(100 * time.Millisecond)
	}

	if code, body, _ := call(t, "POST", g.URL+"/threads/kf/sandbox/freeze", nil); code != 200 {
		t.Fatalf("freeze: %d %s", code, body)
	}
	before := ticks()
	if len(before) == 0 {
		t.Fatal("the Pod's commands are gone after the freeze")
	}
	time.Sleep(5 * time.Second)
	after := ticks()
	for pid, was := range before {
		if now := after[pid]; now != was || !strings.HasPrefix(was, "T ") {
			t.Errorf("process %d ran while frozen: %q -> %q", pid, was, now)
		}
	}
	if burning() {
		t.Errorf("the burner runs in a frozen sandbox: %v", after)
	}
	if out := shell(t, g.URL, "kf", "echo thawed").Output; strings.TrimSpace(out) != "thawed" {
		t.Fatalf("the next request after the freeze: %q", out)
	}
	deadline = time.Now().Add(20 * time.Second)
	for !burning() {
		if time.Now().After(deadline) {
			t.Fatalf("the burner did not run again after the thaw: %v", ticks())
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, body, _ := call(t, "GET", g.URL+"/admin/v1/sandboxes/"+sid+"/logs?tail=50", nil)
	if code != 200 || !strings.Contains(string(body), "listening") {
		t.Errorf("admin logs: %d %s", code, body)
	}
	code, body, _ = call(t, "GET", g.URL+"/admin/v1/stats?thread=kf", nil)
	var stats struct {
		Supported bool `json:"supported"`
		Sandboxes []struct {
			CPUSeconds  float64 `json:"cpu_seconds"`
			MemoryBytes int64   `json:"memory_bytes"`
		} `json:"sandboxes"`
	}
	if code != 200 || json.Unmarshal(body, &stats) != nil || !stats.Supported || len(stats.Sandboxes) != 1 ||
		stats.Sandboxes[0].CPUSeconds <= 0 || stats.Sandboxes[0].MemoryBytes <= 0 {
		t.Errorf("admin stats: %d %s", code, body)
	}
}
