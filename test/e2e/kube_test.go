package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestMain stops the Kubernetes API server the kube tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopKubeAPIServer()
	os.Exit(code)
}

// TestKubernetesBackendThroughTheGateway runs a gateway with the kubernetes
// backend in nodeport mode against a real API server, under the RBAC Role
// of deployments/kubernetes/rbac.yaml, with the stand-in kubelet serving
// each Pod on its Service's nodePort: create through the gateway, exec,
// idle reap, explicit destroy — and each time the Service goes with the Pod.
func TestKubernetesBackendThroughTheGateway(t *testing.T) {
	t.Parallel()
	api := testutil.StartKubeAPIServer(t)
	ns := api.Namespace(t)
	token := api.ApplyRBAC(t, ns, filepath.Join(testutil.ModuleRoot(), "deployments", "kubernetes", "rbac.yaml"))
	kubelet := testutil.StartKubelet(t, api, ns, t.TempDir())
	userData := t.TempDir()
	f := newFleet(t,
		"--backend", "kubernetes",
		"--kubernetes-kubeconfig", api.Kubeconfig(t, token, ns),
		"--kubernetes-url-mode", "nodeport",
		"--kubernetes-node-host", "127.0.0.1",
		"--kubernetes-user-data-host-path", userData,
		"--image", "sandgate-sandbox:test",
		"--idle-timeout", "3s",
		"--reap-interval", "200ms",
	)
	g := f.start()

	pods := api.Admin.CoreV1().Pods(ns)
	services := api.Admin.CoreV1().Services(ns)
	gone := func(name string) bool {
		_, perr := pods.Get(t.Context(), name, metav1.GetOptions{})
		_, serr := services.Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr) && !kubelet.Running(name)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s\n%s", what, tail(g.logs.String(), 40))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Create through the gateway: the first exec provisions the Pod.
	d := shell(t, g.URL, "k1", "echo kube > /mnt/user-data/workspace/hello.txt && cat /mnt/user-data/workspace/hello.txt")
	if strings.TrimSpace(d.Output) != "kube" {
		t.Fatalf("exec output %q", d.Output)
	}
	sid := identity.SandboxID("default", "k1")
	name := "sandgate-sandbox-" + sid
	pod, err := pods.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod of thread k1: %v", err)
	}
	if pod.Labels[backend.LabelSandboxID] != sid || pod.Annotations["sandgate.thread"] != "k1" {
		t.Errorf("pod identity: %v %v", pod.Labels, pod.Annotations)
	}
	svc, err := services.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != pod.UID {
		t.Fatalf("service of thread k1: %+v, %v", svc, err)
	}
	v := sandboxOf(t, g.URL, "k1")
	if v.SandboxID != sid {
		t.Errorf("sandbox view %+v", v)
	}
	onNode := filepath.Join(userData, "users", "default", "threads", "k1", "user-data", "workspace", "hello.txt")
	if b, err := os.ReadFile(onNode); err != nil || strings.TrimSpace(string(b)) != "kube" {
		t.Errorf("thread file on the node's user-data dir: %q, %v", b, err)
	}

	// Idle: the reaper destroys the Pod, and its Service with it.
	waitFor("the idle sandbox is reaped", func() bool { return gone(name) })
	if code, _, _ := call(t, "GET", g.URL+"/threads/k1/sandbox", nil); code != 404 {
		t.Errorf("GET sandbox after reap = %d, want 404", code)
	}

	// Recreate: the thread's files are still there (the volume outlives Pods).
	d = shell(t, g.URL, "k1", "cat /mnt/user-data/workspace/hello.txt")
	if strings.TrimSpace(d.Output) != "kube" {
		t.Fatalf("after recreate, exec output %q", d.Output)
	}
	newPod, err := pods.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || newPod.UID == pod.UID {
		t.Fatalf("recreated pod: %v (uid %v, old %v)", err, newPod.UID, pod.UID)
	}

	// Explicit destroy.
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/k1/sandbox?destroy=true", nil); code != 200 && code != 204 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	waitFor("the destroyed sandbox's pod and service are gone", func() bool { return gone(name) })
}
