package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestKustomizeBaseOnTheRealNode deploys the kustomize base — gateway
// Deployment, Redis StatefulSet, ServiceAccount and Role, the restricted
// namespace — into the real node (kubelet, containerd, runc), through an
// overlay that changes only what this machine lacks: images built here
// (the gateway image by build.sh, Redis from this machine's binaries, the
// sandbox image), one replica, and, with no kube-proxy or cluster DNS on
// the node, the API server's and Redis's addresses. The gateway, running
// in its Pod as its ServiceAccount, makes a sandbox Pod that passes the
// restricted Pod Security Standard; in it commands run as uid 1000 with no
// capabilities, no_new_privs, seccomp and a read-only root; its memory
// limit OOM-kills a hog (measured in its cgroup) while the sandbox lives
// on; every Pod's probes pass (Ready, no restart).
func TestKustomizeBaseOnTheRealNode(t *testing.T) {
	t.Parallel()
	node := testutil.StartKubeNode(t)
	api := testutil.StartKubeAPIServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	gw, sandbox := gatewayImage(t), node.SandboxImage
	redisImage, err := testutil.BuildRedisImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node.ImportImage(t, gw)
	node.ImportImage(t, redisImage)

	ns := "sgdeploy-" + randomHex(t, 4)
	t.Cleanup(func() { _ = api.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	redisVolume(t, api, ns)
	o := overlay{dir: t.TempDir(), ns: ns, images: map[string]string{"sandgate-gateway": gw, "redis": redisImage}, sandboxImage: sandbox}

	// First Redis alone (the gateway at 0 replicas): its Pod IP stands in
	// for the Service name the gateway's Redis URL holds.
	api.Kubectl(t, "apply", "-f", o.render(t, api, 0, "", "", ""))
	redis := waitPodReady(ctx, t, api, ns, "app.kubernetes.io/name=sandgate-redis")

	const user = "deployer"
	key := randomHex(t, 32)
	sum := sha256.Sum256([]byte(key))
	if _, err := api.Admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sandgate-auth"},
		StringData: map[string]string{"api-keys": user + "=" + hex.EncodeToString(sum[:]) + ":threads"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort := node.ServeAPIToPods(t, api)
	api.Kubectl(t, "apply", "-f", o.render(t, api, 1, redis.Status.PodIP, apiHost, apiPort))
	gwPod := waitPodReady(ctx, t, api, ns, "app.kubernetes.io/name=sandgate-gateway")
	base := "http://" + net.JoinHostPort(gwPod.Status.PodIP, "8080")
	hc := &http.Client{Timeout: 2 * time.Minute}

	out, code := execThrough(t, hc, base, key, "deploy",
		`id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; touch /probe 2>/dev/null && echo root-writable || echo root-read-only`)
	for _, want := range []string{"1000\n", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "root-read-only"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("in the sandbox (exit %d): want %q in:\n%s", code, want, out)
		}
	}
	// The gateway asks the server itself (pod-ip), before the kubelet's
	// readiness probe, once a second, has passed: wait for that too.
	sb := waitPodReady(ctx, t, api, ns, backend.LabelManagedBy+"="+backend.ManagedByValue)
	c := sb.Spec.Containers[0]
	if lim := c.Resources.Limits[corev1.ResourceMemory]; lim.Cmp(resource.MustParse("1Gi")) != 0 ||
		sb.Spec.SecurityContext.SeccompProfile == nil || sb.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("sandbox pod %s: limits %v, pod security %+v, container security %+v",
			sb.Name, c.Resources.Limits, sb.Spec.SecurityContext, c.SecurityContext)
	}

	began := time.Now()
	out, code = execThrough(t, hc, base, key, "deploy", `x=$(head -c 1200000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
	took := time.Since(began)
	if code == 0 || strings.Contains(out, "survived") {
		t.Fatalf("a 1.2 GB hog under the 1Gi limit: exit %d, %q", code, out)
	}
	peak, oom := node.MemoryCgroup(t, string(sb.UID))
	if peak == 0 || peak > 1<<30 || !strings.Contains(oom, "oom_kill ") || strings.Contains(oom, "oom_kill 0") {
		t.Errorf("sandbox memory cgroup: peak %d bytes (limit %d), oom_control %q", peak, 1<<30, oom)
	}
	if out, code := execThrough(t, hc, base, key, "deploy", "echo alive"); code != 0 || strings.TrimSpace(out) != "alive" {
		t.Errorf("the sandbox after its hog was killed: exit %d, %q", code, out)
	}
	t.Logf("hog OOM-killed after %v; sandbox container peak %d bytes of a 1Gi limit", took.Round(time.Millisecond), peak)

	// Every Pod Ready (readiness probes), none restarted (liveness probes).
	all, err := api.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range all.Items {
		p := &all.Items[i]
		for _, cs := range p.Status.ContainerStatuses {
			if !ready(p) || cs.RestartCount != 0 {
				t.Errorf("pod %s: ready %v, container %s restarted %d times", p.Name, ready(p), cs.Name, cs.RestartCount)
			}
		}
	}
}

// overlay is the test's kustomization over the base.
type overlay struct {
	dir, ns      string
	images       map[string]string // the base's image name -> an image imported into the node
	sandboxImage string
}

// render writes the overlay (replicas gateways; with redisIP, the gateway
// reaches Redis and the API server at those addresses) and returns the
// manifest kubectl kustomize makes of it.
func (o overlay) render(t *testing.T, api *testutil.KubeAPI, replicas int, redisIP, apiHost, apiPort string) string {
	t.Helper()
	rel, err := filepath.Rel(o.dir, repoPath("deployments", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\nnamespace: %s\n", rel, o.ns)
	fmt.Fprintf(&b, "replicas: [{name: sandgate-gateway, count: %d}]\nimages:\n", replicas)
	for name, image := range o.images {
		repo, tag, _ := strings.Cut(image, ":")
		fmt.Fprintf(&b, "  - {name: %s, newName: %s, newTag: %q}\n", name, repo, tag)
	}
	fmt.Fprintf(&b, "configMapGenerator:\n  - name: sandgate-gateway\n    behavior: merge\n    literals: [SANDGATE_IMAGE=%s, SANDGATE_KUBERNETES_IMAGE_PULL_POLICY=Never]\n", o.sandboxImage)
	if redisIP != "" {
		fmt.Fprintf(&b, `patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: sandgate-gateway}
      spec:
        template:
          spec:
            hostAliases: [{ip: %q, hostnames: [sandgate-redis]}]
            containers:
              - name: gateway
                env:
                  - {name: KUBERNETES_SERVICE_HOST, value: %q}
                  - {name: KUBERNETES_SERVICE_PORT, value: %q}
`, redisIP, apiHost, apiPort)
	}
	if err := os.WriteFile(filepath.Join(o.dir, "kustomization.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(o.dir, fmt.Sprintf("rendered-%d.yaml", replicas))
	if err := os.WriteFile(manifest, []byte(api.Kubectl(t, "kustomize", o.dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return manifest
}

// redisVolume is the PersistentVolume the Redis StatefulSet's claim binds:
// a node directory, as a cluster's provisioner would make a disk.
func redisVolume(t *testing.T, api *testutil.KubeAPI, ns string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "redis")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil { // Redis runs as uid 999; a hostPath gets no fsGroup
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-redis"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: "data-sandgate-redis-0"},
		},
	}
	if _, err := api.Admin.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.Admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

// waitPodReady waits up to 3 minutes for the one Pod of selector to be
// Ready; a failure says why, with the Pod's log.
func waitPodReady(ctx context.Context, t *testing.T, api *testutil.KubeAPI, ns, selector string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	last, logs := "no pod", func(bool) []byte { return nil }
	for {
		pods, err := api.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(pods.Items) == 1 {
			p := &pods.Items[0]
			if ready(p) {
				return p
			}
			b, _ := json.Marshal(p.Status)
			last = string(b)
			logs = func(previous bool) []byte {
				out, _ := api.Admin.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(context.Background())
				return out
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount > 0 { // it will not come up by waiting
					t.Fatalf("pod %s: container %s restarted; its last log:\n%s", p.Name, cs.Name, logs(true))
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s not ready: %v; last status %s\nlog:\n%s", selector, ctx.Err(), last, logs(false))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// execThrough runs command in the thread's sandbox through the gateway and
// returns its output and exit code.
func execThrough(t *testing.T, hc *http.Client, base, key, thread, command string) (string, int) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"command": command})
	resp := post(t, hc, base+"/threads/"+thread+"/v1/shell/exec", key, string(body))
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Data struct {
			Output   string `json:"output"`
			ExitCode *int   `json:"exit_code"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &env) != nil || env.Data.ExitCode == nil {
		t.Fatalf("exec %q: %d %s", command, resp.StatusCode, raw)
	}
	return env.Data.Output, *env.Data.ExitCode
}
