package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestMain stops the Kubernetes API server the kube tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopKubeAPIServer()
	os.Exit(code)
}

// kubeCluster is a test's namespace on the package's real node
// (testutil.StartKubeNode), enforcing the restricted Pod Security Standard,
// with the gateway's RBAC Role and the thread data on a PVC bound to the
// node directory userData.
type kubeCluster struct {
	api      *testutil.KubeAPI
	node     *testutil.KubeNode
	ns       string
	userData string
}

func newKubeCluster(t *testing.T) *kubeCluster {
	t.Helper()
	node := testutil.StartKubeNode(t)
	api := testutil.StartKubeAPIServer(t)
	c := &kubeCluster{api: api, node: node, ns: api.Namespace(t), userData: filepath.Join(t.TempDir(), "user-data")}
	api.EnforcePodSecurity(t, c.ns, "restricted")
	api.HostPathPVC(t, c.ns, "sandgate-data", c.userData, false)
	t.Cleanup(func() { // the namespace controller stops its Pods
		_ = api.Admin.CoreV1().Namespaces().Delete(context.Background(), c.ns, metav1.DeleteOptions{})
	})
	return c
}

// flags run a gateway's kubernetes backend on the cluster as its
// ServiceAccount: Sandgate's server image under the restricted profile,
// reached by Pod IP.
func (c *kubeCluster) flags(t *testing.T) []string {
	t.Helper()
	token := c.api.ApplyRBAC(t, c.ns, filepath.Join(testutil.ModuleRoot(), "deployments", "kubernetes", "rbac.yaml"))
	return []string{
		"--backend", "kubernetes",
		"--kubernetes-kubeconfig", c.api.Kubeconfig(t, token, c.ns),
		"--kubernetes-url-mode", "pod-ip",
		"--kubernetes-user-data-pvc", "sandgate-data",
		"--image", c.node.SandboxImage,
		"--kubernetes-image-pull-policy", "Never",
		"--kubernetes-server", sandboxspec.ServerImagePath,
		"--kubernetes-run-as-non-root", "--kubernetes-run-as-user", "1000", "--kubernetes-run-as-group", "1000",
		"--kubernetes-read-only-root",
	}
}

// TestKubernetesBackendThroughTheGateway runs a gateway with the kubernetes
// backend on the real node, under the RBAC Role of
// deployments/kubernetes/rbac.yaml: create through the gateway, exec, idle
// reap, explicit destroy — and each time the Service goes with the Pod.
func TestKubernetesBackendThroughTheGateway(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	api, ns, userData := c.api, c.ns, c.userData
	f := newFleet(t, append(c.flags(t),
		"--idle-timeout", "3s",
		"--reap-interval", "200ms",
	)...)
	g := f.start()

	pods := api.Admin.CoreV1().Pods(ns)
	services := api.Admin.CoreV1().Services(ns)
	gone := func(name string) bool {
		_, perr := pods.Get(t.Context(), name, metav1.GetOptions{})
		_, serr := services.Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(40 * time.Second)
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
