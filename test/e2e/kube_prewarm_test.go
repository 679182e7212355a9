package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/kubernetes"
	"github.com/sandgate/sandgate/internal/identity"
)

// TestKubernetesPrewarmedPodsAreClaimedByNewThreads: with a pre-started
// pool of two Pods on the real node (data_dir the user-data volume's root),
// four new threads arriving at once on two replicas each get a Pod of their
// own, one or two of them a claimed pre-started one; a claimed Pod writes
// to its thread's directory on the volume, nothing is left under prewarm/,
// the pool is refilled, and when the claimed Pod is deleted behind the
// gateway's back the thread's next Pod, made cold, has its files.
func TestKubernetesPrewarmedPodsAreClaimedByNewThreads(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	f := newFleet(t, append(c.flags(t), "--data-dir", c.userData, "--kubernetes-shared-data-dir",
		"--prewarm", "2", "--max-sandboxes", "0")...)
	replicas := []*gateway{f.start(), f.start()}
	pool := c.waitUnclaimed(t, 2)

	threads := []string{"pa", "pb", "pc", "pd"}
	outcomes := putAll(t, replicas, threads)

	claimedThread := ""
	seen := map[string]string{} // pod UID -> thread
	for i, thread := range threads {
		out := shell(t, replicas[(i+1)%2].URL, thread, "echo "+thread+" > /mnt/user-data/workspace/mine && cat /mnt/user-data/workspace/mine")
		if strings.TrimSpace(out.Output) != thread {
			t.Fatalf("thread %s: exec output %q", thread, out.Output)
		}
		pod := c.podAnswering(t, identity.SandboxID("default", thread))
		if other, dup := seen[string(pod.UID)]; dup {
			t.Fatalf("threads %s and %s share Pod %s", other, thread, pod.Name)
		}
		seen[string(pod.UID)] = thread
		// A claimed Pod keeps the name it was pre-started under; one made
		// for the thread is named after it. (Under load a late request can
		// claim a Pod of the refill, which is not in pool.)
		if claimed := pod.Name != "sandgate-sandbox-"+identity.SandboxID("default", thread); claimed != (outcomes[i] == "prewarm") {
			_, inPool := pool[string(pod.UID)]
			t.Fatalf("thread %s: outcome %s, Pod %s (pre-started: %v, one of the first pool %v: %v)", thread, outcomes[i], pod.Name, claimed, pool, inPool)
		}
		if outcomes[i] == "prewarm" {
			claimedThread = thread
			if pod.Labels[backend.LabelPrewarm] != "" || pod.Annotations[kubernetes.AnnotationThread] != thread {
				t.Fatalf("claimed Pod %s keeps a pre-started identity: labels %v annotations %v", pod.Name, pod.Labels, pod.Annotations)
			}
		}
		host := filepath.Join(backend.ThreadDir(c.userData, "default", thread), "workspace", "mine")
		if b, err := os.ReadFile(host); err != nil || strings.TrimSpace(string(b)) != thread {
			t.Fatalf("thread %s's file on the volume: %q %v", thread, b, err)
		}
	}
	if claimedThread == "" {
		t.Fatalf("outcomes %v: no thread claimed a pre-started Pod", outcomes)
	}
	if left, _ := os.ReadDir(filepath.Join(c.userData, "prewarm")); len(left) > 2 {
		t.Fatalf("prewarm dirs left behind: %d, want only the refilled pool's", len(left))
	}
	refilled := c.waitUnclaimed(t, 2)
	for uid := range refilled {
		if _, used := seen[uid]; used {
			t.Fatalf("a thread's Pod is offered again as pre-started")
		}
	}

	// The claimed Pod goes; the thread's next Pod is made cold, on its data.
	sid := identity.SandboxID("default", claimedThread)
	old := c.podAnswering(t, sid)
	if err := c.api.Admin.CoreV1().Pods(c.ns).Delete(t.Context(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := call(t, "POST", replicas[0].URL+"/threads/"+claimedThread+"/v1/shell/exec", map[string]any{"command": "cat /mnt/user-data/workspace/mine"})
		var env envelope
		var d execData
		// An answer can still come from the deleted Pod, its successor not
		// made yet (no live Pod then): only a new Pod's answer counts.
		if code == 200 && json.Unmarshal(body, &env) == nil && json.Unmarshal(env.Data, &d) == nil {
			live := c.livePods(t, sid)
			if len(live) > 1 {
				t.Fatalf("sandbox %s: %d live Pods answer to it, want 1", sid, len(live))
			}
			if len(live) == 1 && live[0].UID != old.UID {
				now := live[0]
				if strings.TrimSpace(d.Output) != claimedThread || now.Name != "sandgate-sandbox-"+sid {
					t.Fatalf("the new Pod %s reads %q, want %s", now.Name, d.Output, claimedThread)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new Pod answers after the claimed one was deleted: %d %s\n%s", code, body, tail(replicas[0].logs.String(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitUnclaimed waits for n running pre-started Pods no thread claimed,
// returned by UID.
func (c *kubeCluster) waitUnclaimed(t *testing.T, n int) map[string]string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		list, err := c.api.Admin.CoreV1().Pods(c.ns).List(t.Context(), metav1.ListOptions{LabelSelector: backend.LabelPrewarm})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Labels[kubernetes.LabelClaimedAs] == "" {
				got[string(p.UID)] = p.Name
			}
		}
		if len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pre-started Pods, want %d", len(got), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podAnswering is the one live Pod answering to sandbox sid: named after
// it, or claimed as it.
func (c *kubeCluster) podAnswering(t *testing.T, sid string) corev1.Pod {
	t.Helper()
	live := c.livePods(t, sid)
	if len(live) != 1 {
		t.Fatalf("sandbox %s: %d live Pods answer to it, want 1", sid, len(live))
	}
	return live[0]
}

// livePods lists the Pods that answer to sid and are not going away.
func (c *kubeCluster) livePods(t *testing.T, sid string) []corev1.Pod {
	t.Helper()
	list, err := c.api.Admin.CoreV1().Pods(c.ns).List(t.Context(), metav1.ListOptions{LabelSelector: backend.LabelManagedBy + "=" + backend.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		answers := p.Labels[kubernetes.LabelClaimedAs] == sid || p.Name == "sandgate-sandbox-"+sid && p.Labels[kubernetes.LabelClaimedAs] == ""
		if answers && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	return live
}
