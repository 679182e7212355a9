package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopKubeAPIServer()
	os.Exit(code)
}

// kubeEnv is one test's namespace on the package's real node
// (testutil.StartKubeNode: kubelet, containerd, runc, the CNI bridge),
// enforcing the restricted Pod Security Standard, with a kubeconfig
// restricted to the Role in rbac.yaml, and the user data and skills on
// PVCs bound to node directories under pvcRoot.
type kubeEnv struct {
	api        *testutil.KubeAPI
	node       *testutil.KubeNode
	ns         string
	kubeconfig string
	pvcRoot    string
}

func newKubeEnv(t *testing.T) *kubeEnv {
	t.Helper()
	node := testutil.StartKubeNode(t)
	api := testutil.StartKubeAPIServer(t)
	ns := api.Namespace(t)
	api.EnforcePodSecurity(t, ns, "restricted")
	token := api.ApplyRBAC(t, ns, rbacManifest)
	e := &kubeEnv{api: api, node: node, ns: ns, kubeconfig: api.Kubeconfig(t, token, ns), pvcRoot: t.TempDir()}
	api.HostPathPVC(t, ns, "sandgate-data", filepath.Join(e.pvcRoot, "sandgate-data"), false)
	api.HostPathPVC(t, ns, "skills", filepath.Join(e.pvcRoot, "skills"), true)
	return e
}

// config runs Sandgate's server image on the real node as the restricted
// profile wants it (a uid of its own, read-only image), reached by Pod IP
// (the node's bridge is on this host), user data and skills on PVCs; the
// namespace comes from the kubeconfig's context.
func (e *kubeEnv) config() Config {
	return Config{
		Kubeconfig: e.kubeconfig, Image: e.node.SandboxImage, ImagePullPolicy: "Never", URLMode: URLPodIP,
		Server: sandboxspec.ServerImagePath, RunAsNonRoot: true, RunAsUser: 1000, RunAsGroup: 1000, FSGroup: 1000,
		ReadOnlyRootFS: true, UserDataPVC: "sandgate-data", SkillsPVC: "skills", Instance: "test",
	}
}

func (e *kubeEnv) backend(t *testing.T, cfg Config) *Kubernetes {
	t.Helper()
	k, err := New(t.Context(), cfg, testLog(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func podName(sid string) string { return DefaultPodPrefix + "-" + sid }

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func spec(user, thread string) backend.Spec {
	s := backend.Spec{SandboxID: identity.SandboxID(user, thread), User: user, Thread: thread, Env: map[string]string{"GREETING": "hello"},
		Secret: "secret-of-" + user + "-0123456789abcdef0123456789abcdef"}
	s.Labels = backend.IdentityLabels(s, "test", map[string]string{"team": "x"})
	return s
}

func (e *kubeEnv) pod(t *testing.T, name string) (*corev1.Pod, bool) {
	t.Helper()
	pod, err := e.api.Admin.CoreV1().Pods(e.ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return pod, true
}

func (e *kubeEnv) service(t *testing.T, name string) (*corev1.Service, bool) {
	t.Helper()
	svc, err := e.api.Admin.CoreV1().Services(e.ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return svc, true
}

func (e *kubeEnv) policy(t *testing.T, name string) (*networkingv1.NetworkPolicy, bool) {
	t.Helper()
	np, err := e.api.Admin.NetworkingV1().NetworkPolicies(e.ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return np, true
}

// TestContract runs the shared contract on the real node: each Pod runs
// Sandgate's server under the restricted profile with a secret of its own
// and the PVC's thread subPath as its user data, so all of it holds, files
// across a recreate included.
func TestContract(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	backendtest.Run(t, backendtest.Harness{
		Name:     Name,
		Instance: "test",
		New:      func(t *testing.T) backend.Backend { return e.backend(t, e.config()) },
	})
}

// TestContractPrewarmed runs the contract on Pods started without a
// thread and claimed (the prewarm pool, kubernetes_shared_data_dir): the
// specs' data dir is the user-data PVC's root, as the gateway's is, so a
// claim moves the pre-started Pod's files to the thread beneath its
// running subPath mounts, and a claimed Pod must be indistinguishable from
// a created one, from any instance.
func TestContractPrewarmed(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	cfg := e.config()
	cfg.SharedDataDir = true
	dataDir := filepath.Join(e.pvcRoot, "sandgate-data")
	backendtest.Run(t, backendtest.Harness{
		Name:      Name,
		Instance:  "test",
		Prewarmed: true,
		New:       func(t *testing.T) backend.Backend { return e.backend(t, cfg) },
		Spec: func(t *testing.T, user, thread string) backend.Spec {
			return backendtest.Spec(t, backend.MountConfig{DataDir: dataDir}, user, thread)
		},
	})
}

func TestCreateExecDestroy(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	s := spec("alice", "chat:42")
	info := backendtest.MustCreate(t, k, s)
	name := podName(s.SandboxID)

	pod, ok := e.pod(t, name)
	if !ok {
		t.Fatal("no pod")
	}
	svc, ok := e.service(t, name)
	if !ok {
		t.Fatal("no service")
	}
	if info.Incarnation != string(pod.UID) || info.Backend != Name || info.SandboxID != s.SandboxID ||
		info.User != "alice" || info.Thread != "chat:42" || info.CreatedAt.IsZero() || info.Labels["team"] != "x" {
		t.Errorf("info = %+v", info)
	}
	if pod.Status.PodIP == "" || info.URL != "http://"+pod.Status.PodIP+":8080" {
		t.Errorf("URL %s for pod IP %q", info.URL, pod.Status.PodIP)
	}
	// The objects as the API server stored them.
	if o := svc.OwnerReferences; len(o) != 1 || o[0].UID != pod.UID || o[0].Kind != "Pod" || !*o[0].Controller {
		t.Errorf("service owner refs = %+v, want the pod %s", o, pod.UID)
	}
	if pod.Labels[backend.LabelSandboxID] != s.SandboxID || pod.Labels[backend.LabelManagedBy] != "sandgate" ||
		pod.Annotations[AnnotationThread] != "chat:42" {
		t.Errorf("pod identity = %v %v", pod.Labels, pod.Annotations)
	}
	c := pod.Spec.Containers[0]
	if *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.Capabilities.Drop[0] != "ALL" ||
		!*c.SecurityContext.ReadOnlyRootFilesystem || !*pod.Spec.SecurityContext.RunAsNonRoot ||
		*pod.Spec.SecurityContext.RunAsUser != 1000 ||
		pod.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*pod.Spec.AutomountServiceAccountToken || c.ReadinessProbe.TCPSocket == nil || len(pod.Spec.InitContainers) != 1 {
		t.Errorf("stored pod spec lost its restrictions: %+v", pod.Spec)
	}

	// The sandbox runs with the thread's PVC subPath as its workspace, the
	// env given, and skills read-only.
	out := backendtest.Exec(t, info, "echo \"$GREETING\" > /mnt/user-data/workspace/note.txt && cat /mnt/user-data/workspace/note.txt").Output
	if strings.TrimSpace(out) != "hello" {
		t.Errorf("exec output %q", out)
	}
	onPVC := filepath.Join(e.pvcRoot, "sandgate-data", "users", "alice", "threads", "chat:42", "user-data", "workspace", "note.txt")
	if b, err := os.ReadFile(onPVC); err != nil || strings.TrimSpace(string(b)) != "hello" {
		t.Errorf("file on the PVC at the thread's subPath: %q, %v", b, err)
	}
	if err := backendtest.WriteFile(t, info, "/mnt/skills/x", "x"); err == nil {
		t.Error("skills writable")
	}
	if err := backendtest.WriteFile(t, info, "/mnt/user-data/outputs/x", "x"); err != nil {
		t.Errorf("outputs not writable: %v", err)
	}

	if ok, err := k.Alive(backendtest.Ctx(t), info); err != nil || !ok {
		t.Errorf("Alive = %v, %v", ok, err)
	}
	if err := k.Ping(backendtest.Ctx(t)); err != nil {
		t.Errorf("Ping = %v", err)
	}
	if err := k.Destroy(backendtest.Ctx(t), info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if pod, ok := e.pod(t, name); ok && pod.DeletionTimestamp == nil {
		t.Error("pod still there after Destroy, not deleting")
	}
	if _, ok := e.service(t, name); ok {
		t.Error("service still there after Destroy")
	}
	// Gone from the API only once the kubelet has stopped its containers.
	backendtest.Eventually(t, "the kubelet stops the pod", func() bool { _, ok := e.pod(t, name); return !ok })
	backendtest.Eventually(t, "Alive is false", func() bool {
		ok, err := k.Alive(backendtest.Ctx(t), info)
		return err == nil && !ok
	})
}

func TestCrashedSandboxIsReplacedAndCleanedUp(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	s := spec("carol", "t")
	name := podName(s.SandboxID)
	first := backendtest.MustCreate(t, k, s)

	e.node.Crash(t, first.Incarnation)
	backendtest.Eventually(t, "Alive notices the crash", func() bool {
		ok, err := k.Alive(backendtest.Ctx(t), first)
		return err == nil && !ok
	})
	if pod, _ := e.pod(t, name); pod == nil || pod.Status.Phase != corev1.PodFailed {
		t.Fatalf("crashed pod = %+v", pod)
	}
	if _, ok, err := k.Discover(backendtest.Ctx(t), s.SandboxID); ok || err != nil {
		t.Errorf("Discover of a Failed pod = %v, %v", ok, err)
	}

	second := backendtest.MustCreate(t, k, s) // replaces the Failed pod under the same name
	if second.Incarnation == first.Incarnation {
		t.Fatal("Create returned the Failed incarnation")
	}
	if out := backendtest.Exec(t, second, "echo again").Output; strings.TrimSpace(out) != "again" {
		t.Errorf("exec on the replacement: %q", out)
	}
	svc, _ := e.service(t, name)
	if svc == nil || svc.OwnerReferences[0].UID != types.UID(second.Incarnation) {
		t.Errorf("service not re-owned by the new pod: %+v", svc)
	}
	if np, ok := e.policy(t, name); !ok || !ownedBy(np, types.UID(second.Incarnation)) {
		t.Errorf("network policy not re-owned by the new pod: %+v", np)
	}
	// Destroying the old incarnation leaves the new one alone.
	if err := k.Destroy(backendtest.Ctx(t), first); err != nil {
		t.Fatal(err)
	}
	if ok, err := k.Alive(backendtest.Ctx(t), second); err != nil || !ok {
		t.Fatalf("new incarnation after destroying the old one: Alive = %v, %v", ok, err)
	}
	if _, ok := e.service(t, name); !ok {
		t.Fatal("destroying the old incarnation removed the new one's service")
	}

	// List skips finished pods and removes them.
	e.node.Crash(t, second.Incarnation)
	backendtest.Eventually(t, "the pod is Failed", func() bool {
		pod, _ := e.pod(t, name)
		return pod != nil && pod.Status.Phase == corev1.PodFailed
	})
	list, err := k.List(backendtest.Ctx(t))
	if err != nil || len(list) != 0 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, ok := e.pod(t, name); ok {
		t.Error("List left the finished pod")
	}
	if _, ok := e.service(t, name); ok {
		t.Error("List left the finished pod's service")
	}
	if _, ok := e.policy(t, name); ok {
		t.Error("List left the finished pod's network policy")
	}
}

func TestCreateFailsFastWhenThePodFails(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	cfg := e.config()
	cfg.Image = "sandgate.invalid/missing:never" // not on the node, and never pulled
	k := e.backend(t, cfg)
	s := spec("dave", "t")
	began := time.Now()
	_, err := k.Create(backendtest.Ctx(t), s)
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("Create = %v, want the pod's failure reason", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("Create took %v to notice a Failed pod", d)
	}
	if pod, ok := e.pod(t, podName(s.SandboxID)); ok && pod.DeletionTimestamp == nil {
		t.Error("failed pod left behind")
	}
	if _, ok := e.service(t, podName(s.SandboxID)); ok {
		t.Error("failed pod's service left behind")
	}
	backendtest.Eventually(t, "the failed pod is gone", func() bool { _, ok := e.pod(t, podName(s.SandboxID)); return !ok })
}

// countingTransport counts requests to the API server.
type countingTransport struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

func TestAliveReadsTheInformerCache(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	cfg := e.config()
	rc, ns, err := restConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counter := &countingTransport{}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	k, err := newWithREST(t.Context(), cfg, rc, ns, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	info := backendtest.MustCreate(t, k, spec("erin", "t"))

	before := counter.n.Load()
	for range 200 {
		if ok, err := k.Alive(backendtest.Ctx(t), info); err != nil || !ok {
			t.Fatalf("Alive = %v, %v", ok, err)
		}
	}
	if n := counter.n.Load() - before; n != 0 {
		t.Errorf("200 Alive calls made %d API requests, want 0 (informer cache)", n)
	}
	// A miss is confirmed with the API server.
	stale := info
	stale.Incarnation = "not-this-one"
	if ok, err := k.Alive(backendtest.Ctx(t), stale); err != nil || ok {
		t.Errorf("Alive of another incarnation = %v, %v", ok, err)
	}
	if counter.n.Load() == before {
		t.Error("a cache miss was not confirmed with the API server")
	}
}

func TestUnreachableAPIServerIsUnavailable(t *testing.T) {
	t.Parallel()
	api := testutil.StartKubeAPIServer(t)
	cfg := Config{Image: "x", Kubeconfig: api.Kubeconfig(t, "no-token", "default")}
	rc, ns, err := restConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc.Host = "https://127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)) // nothing listens there
	k, err := newWithREST(t.Context(), cfg, rc, ns, testLog(t))
	if err != nil {
		t.Fatalf("New must not need the API server: %v", err)
	}
	t.Cleanup(func() { _ = k.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	info := backend.Info{SandboxID: identity.SandboxID("u", "t")}
	if _, err := k.Alive(ctx, info); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Alive = %v, want ErrUnavailable", err)
	}
	if _, _, err := k.Discover(t.Context(), info.SandboxID); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Discover = %v, want ErrUnavailable", err)
	}
	if err := k.Destroy(t.Context(), info); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Destroy = %v, want ErrUnavailable", err)
	}
	if err := k.Ping(t.Context()); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Ping = %v, want ErrUnavailable", err)
	}
}
