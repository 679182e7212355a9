package testutil

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/osthread"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The node's components and the identities the API server knows them by
// (its static token file): the kubelet is a node to the Node authorizer,
// the scheduler has the bootstrap role of its name; the controller manager
// is a master, as its own role presumes a credential per controller
// (--use-service-account-credentials), which a test cluster can spare.
var nodeComponents = map[string]string{
	"kubelet":            "system:node:" + nodeName + ",node-uid,system:nodes",
	"scheduler":          "system:kube-scheduler,scheduler-uid",
	"controller-manager": "system:kube-controller-manager,controller-manager-uid,system:masters",
}

// nodeName is what scripts/kube-node.sh registers its kubelet as.
const nodeName = "sandgate-node"

// nodeSlots is how many nodes scripts/kube-node.sh runs at once; slot i
// has the bridge address 10.244.i.1.
const nodeSlots = 32

// componentTokens mints the node components' tokens and returns their
// lines of the token file.
func (k *KubeAPI) componentTokens() string {
	var b strings.Builder
	for name, ident := range nodeComponents {
		k.tokens[name] = randomHex(16)
		b.WriteString(k.tokens[name] + "," + ident + "\n")
	}
	return b.String()
}

// clientCert is a client certificate for cn signed by the CA, as PEM.
func clientCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, now time.Time) (crt, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// KubeNode is a real node of the package's API server (scripts/kube-node.sh:
// containerd, runc, the CNI bridge, kubelet, kube-scheduler and
// kube-controller-manager), shared by the package's tests like the API
// server. Pods get addresses in PodCIDR on a bridge of this host, which the
// tests reach directly (url_mode pod_ip); there is no kube-proxy, so
// Service addresses lead nowhere. SandboxImage is the small sandbox image,
// imported into the node's containerd.
type KubeNode struct {
	Name, IP, PodCIDR string
	SandboxImage      string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	nodeOnce sync.Once
	nodeErr  error
)

// StartKubeNode returns the package's real node, starting it (and the API
// server) on first use; StopKubeAPIServer stops both. It needs root, the
// Docker engine (the sandbox image is built there and exported) and what
// scripts/install-deps.sh installs.
func StartKubeNode(t testing.TB) *KubeNode {
	t.Helper()
	api := StartKubeAPIServer(t)
	node, err := sharedNode(api, SandboxImage(t))
	if err != nil {
		t.Fatalf("start kube node: %v", err)
	}
	return node
}

// StartKubeNodeMain is StartKubeNode for a program outside `go test` (the
// bench), with image (BuildSandboxImage) imported into the node; stop
// tears the node and the API server down.
func StartKubeNodeMain(image string) (api *KubeAPI, node *KubeNode, stop func(), err error) {
	if api, err = sharedKube(); err != nil {
		return nil, nil, nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	if node, err = sharedNode(api, image); err != nil {
		StopKubeAPIServer()
		return nil, nil, nil, fmt.Errorf("start kube node: %w", err)
	}
	return api, node, StopKubeAPIServer, nil
}

// sharedNode starts the process's node on first use; later calls get it
// (or its error), whatever image they name.
func sharedNode(api *KubeAPI, image string) (*KubeNode, error) {
	nodeOnce.Do(func() { api.node, nodeErr = startNode(api, image) })
	return api.node, nodeErr
}

func startNode(api *KubeAPI, image string) (*KubeNode, error) {
	dir := filepath.Join(api.dir, "node")
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o700); err != nil {
		return nil, err
	}
	for name := range nodeComponents {
		if err := api.WriteKubeconfig(filepath.Join(dir, name+".kubeconfig"), api.tokens[name], ""); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), api.CAData, 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := saveImage(ctx, image, filepath.Join(dir, "images", "sandbox.tar")); err != nil {
		return nil, err
	}
	n := &KubeNode{SandboxImage: image, dir: dir, done: make(chan struct{})}
	n.cmd = exec.Command("bash", filepath.Join(ModuleRoot(), "scripts", "kube-node.sh"), "run", dir)
	logf, err := os.Create(filepath.Join(dir, "kube-node.log"))
	if err != nil {
		return nil, err
	}
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	// SIGTERM, not SIGKILL, should the test binary die: the script's trap
	// then kills the Pods and removes the node's mounts, cgroups and bridge.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := osthread.Start(n.cmd); err != nil {
		return nil, fmt.Errorf("start scripts/kube-node.sh: %w", err)
	}
	go func() { _ = n.cmd.Wait(); _ = logf.Close(); close(n.done) }()
	if err := n.waitReady(ctx, api); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// waitReady waits for the script's ready file and the Node's Ready
// condition, and reads the node's addresses.
func (n *KubeNode) waitReady(ctx context.Context, api *KubeAPI) error {
	for {
		_, err := os.Stat(filepath.Join(n.dir, "ready"))
		if err == nil {
			node, err := api.Admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err == nil && nodeReady(node) {
				return n.readEnv()
			}
		}
		select {
		case <-n.done:
			return fmt.Errorf("scripts/kube-node.sh exited:\n%s", n.Log("kube-node.log"))
		case <-ctx.Done():
			return fmt.Errorf("node not ready: %w\n%s\n%s", ctx.Err(), n.Log("kube-node.log"), n.Log("kubelet.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (n *KubeNode) readEnv() error {
	f, err := os.Open(filepath.Join(n.dir, "node.env"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), "=")
		switch key {
		case "NODE_NAME":
			n.Name = val
		case "NODE_IP":
			n.IP = val
		case "POD_CIDR":
			n.PodCIDR = val
		}
	}
	return sc.Err()
}

// Log is the tail of one of the node's logs (kubelet.log, containerd.log,
// scheduler.log, controller-manager.log, kube-node.log), for failures.
func (n *KubeNode) Log(name string) string { return tailFile(filepath.Join(n.dir, name)) }

// stop asks the script to tear the node down and waits for it.
func (n *KubeNode) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
	}
}

// saveImage exports a Docker image as a docker-archive tarball.
func saveImage(ctx context.Context, image, path string) error {
	c, err := newDockerClient()
	if err != nil {
		return err
	}
	defer c.Close()
	rc, err := c.ImageSave(ctx, []string{image})
	if err != nil {
		return fmt.Errorf("export %s: %w", image, err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		return fmt.Errorf("export %s: %w", image, err)
	}
	return f.Close()
}

// ImportImage imports a Docker image into the node's containerd, for Pods
// to run with no registry (pull policy IfNotPresent or Never).
func (n *KubeNode) ImportImage(t testing.TB, image string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if err := saveImage(ctx, image, tarball); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(n.dir, "containerd", "containerd.sock")
	if out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "-n", "k8s.io", "images", "import", tarball).CombinedOutput(); err != nil {
		t.Fatalf("import %s into the node: %v\n%s", image, err, out)
	}
}

// ServeAPIToPods makes the API server reachable from the node's Pods: a
// TCP relay on the node's bridge address (in the serving certificate) to
// its loopback listener, until the test ends. In-cluster clients get it
// through KUBERNETES_SERVICE_HOST and _PORT, as there is no kube-proxy for
// the kubernetes Service.
func (n *KubeNode) ServeAPIToPods(t testing.TB, api *KubeAPI) (host, port string) {
	t.Helper()
	target := strings.TrimPrefix(api.URL, "https://")
	ln, err := net.Listen("tcp", net.JoinHostPort(n.IP, "0"))
	if err != nil {
		t.Fatalf("listen on the node's address: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, target)
		}
	}()
	host, port, _ = net.SplitHostPort(ln.Addr().String())
	return host, port
}

// relay copies between c and a new connection to target, both ways, until
// either side ends.
func relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Crash kills the processes of the Pod of that UID from the host (SIGKILL),
// but its Pod sandbox (pause): the container dies as in an OOM kill or a
// crash, and the kubelet reports it.
func (n *KubeNode) Crash(t testing.TB, uid string) {
	t.Helper()
	killed := 0
	for _, pid := range n.Pids(t, uid) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("crash pod %s: no process of it found", uid)
	}
}

// MemoryCgroup reads, on the host, the memory cgroup (v1) of the
// containers of the Pod of that UID: its peak usage in bytes and its
// memory.oom_control (which counts OOM kills: "oom_kill N").
func (n *KubeNode) MemoryCgroup(t testing.TB, uid string) (peak int64, oomControl string) {
	t.Helper()
	var cgroup string
	for _, pid := range n.Pids(t, uid) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		for line := range strings.Lines(string(b)) {
			// Only a memory cgroup of the Pod's own: a process caught
			// joining the container's cgroups one hierarchy at a time
			// (runc exec, a probe) is in the Pod's pids cgroup and still
			// in the root memory cgroup, whose peak is the whole host's
			// (CI read 19.7 GB against a 64 MiB limit).
			if _, path, ok := strings.Cut(strings.TrimSpace(line), ":memory:"); ok && strings.Contains(path, "/pod"+uid+"/") {
				cgroup = "/sys/fs/cgroup/memory" + path
			}
		}
	}
	if cgroup == "" {
		t.Fatalf("pod %s: no memory cgroup of its containers found", uid)
	}
	b, _ := os.ReadFile(cgroup + "/memory.max_usage_in_bytes")
	peak, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	oom, _ := os.ReadFile(cgroup + "/memory.oom_control")
	return peak, string(oom)
}

// Pids are the host pids of the processes of the Pod of that UID (its
// containers' cgroups), but its Pod sandbox (pause).
func (n *KubeNode) Pids(t testing.TB, uid string) []int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "/pod"+uid+"/") {
			continue
		}
		dir := filepath.Dir(f)
		if comm, _ := os.ReadFile(filepath.Join(dir, "comm")); strings.TrimSpace(string(comm)) == "pause" {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// EnforcePodSecurity makes the namespace enforce a Pod Security Standard
// level (restricted, baseline, privileged) through the API server's
// admission.
func (k *KubeAPI) EnforcePodSecurity(t testing.TB, namespace, level string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":%q}}}`, level)
	if _, err := k.Admin.CoreV1().Namespaces().Patch(t.Context(), namespace, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", namespace, err)
	}
}

// HostPathPVC makes the claim in namespace, bound to a PersistentVolume of
// its own on the node directory dir (made world-writable and sticky, like
// /tmp: the kubelet makes a subPath's directories with the volume root's
// mode, owned by root, and sandboxes run as another uid), and waits until
// it is Bound. A hostPath PV is a test's stand-in for a network volume; the
// Pods see a PVC, which the restricted Pod Security Standard allows.
func (k *KubeAPI) HostPathPVC(t testing.TB, namespace, claim, dir string, readOnly bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pv, err := k.BindHostPathPVC(ctx, namespace, claim, dir, readOnly)
	if pv != "" {
		t.Cleanup(func() {
			_ = k.Admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// BindHostPathPVC is HostPathPVC for a program outside `go test` (the
// bench); it returns the PersistentVolume's name once made, which outlives
// the namespace (the API server's end removes it).
func (k *KubeAPI) BindHostPathPVC(ctx context.Context, namespace, claim, dir string, readOnly bool) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		return "", err
	}
	mode := corev1.ReadWriteMany
	if readOnly {
		mode = corev1.ReadOnlyMany
	}
	size := resource.MustParse("1Gi")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:            []corev1.PersistentVolumeAccessMode{mode},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:               &corev1.ObjectReference{Namespace: namespace, Name: claim},
			StorageClassName:       "",
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			VolumeName:       pv.Name,
			StorageClassName: new(""),
		},
	}
	if _, err := k.Admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create pv: %w", err)
	}
	if _, err := k.Admin.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return pv.Name, fmt.Errorf("create pvc: %w", err)
	}
	for {
		got, err := k.Admin.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
		if err == nil && got.Status.Phase == corev1.ClaimBound {
			return pv.Name, nil
		}
		select {
		case <-ctx.Done():
			return pv.Name, fmt.Errorf("pvc %s not bound: %w", claim, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kubectl runs the cached kubectl as the cluster's admin and returns its
// combined output.
func (k *KubeAPI) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := k.WriteKubeconfig(kc, k.adminToken, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(k.BinDir, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
