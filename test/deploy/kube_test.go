package deploy

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/kubernetes"
	"github.com/sandgate/sandgate/internal/testutil"
)

// kubectl is the kubectl v1.37.2 scripts/kube-test-bins.sh builds next to
// the API server, in its cache outside the clone.
func kubectl(t *testing.T, api *testutil.KubeAPI) string {
	t.Helper()
	path := filepath.Join(api.BinDir, "kubectl")
	_, err := os.Stat(path)
	testutil.Require(t, err == nil, "kubectl built by scripts/kube-test-bins.sh")
	return path
}

// TestRBACOneCopy: the Role the backend's tests check and run under
// (deployments/kubernetes/rbac.yaml) is the one kustomize renders.
func TestRBACOneCopy(t *testing.T) {
	t.Parallel()
	target, err := os.Readlink(repoPath("deployments", "kubernetes", "rbac.yaml"))
	if err != nil || target != "base/rbac.yaml" {
		t.Errorf("deployments/kubernetes/rbac.yaml: link to %q, %v; want a symlink to base/rbac.yaml", target, err)
	}
}

// TestKustomizeDryRun renders the base and both overlays with kubectl and
// applies them with --dry-run=server (strict field validation, admission)
// to a real kube-apiserver, after checking what each rendering must hold.
func TestKustomizeDryRun(t *testing.T) {
	api := testutil.StartKubeAPIServer(t)
	bin := kubectl(t, api)
	kubeconfig := api.Kubeconfig(t, adminToken(t, api), "default")
	settings := knownSettings(t)

	for _, tc := range []struct {
		dir       string
		namespace string
		replicas  int32
		redis     bool // the in-cluster Redis StatefulSet (else an external URL)
	}{
		{"base", "sandgate", 3, true},
		{"overlays/dev", "sandgate-dev", 1, true},
		{"overlays/production", "sandgate", 3, false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			rendered := run(t, bin, "kustomize", repoPath("deployments", "kubernetes", tc.dir))
			manifest := filepath.Join(t.TempDir(), "rendered.yaml")
			if err := os.WriteFile(manifest, rendered, 0o600); err != nil {
				t.Fatal(err)
			}
			objs, err := testutil.DecodeManifest(manifest)
			if err != nil {
				t.Fatal(err)
			}
			checkRendered(t, objs, tc.namespace, tc.replicas, tc.redis, settings)

			// A server-side dry run of namespaced objects needs their
			// namespace to exist: make it for real, then dry-run everything.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = api.Admin.CoreV1().Namespaces().Create(ctx,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.namespace}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			out := run(t, bin, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "--validate=strict", "-f", manifest)
			if got, want := bytes.Count(out, []byte("(server dry run)")), len(objs); got != want {
				t.Errorf("dry run applied %d objects, rendered %d:\n%s", got, want, out)
			}
		})
	}
}

// checkRendered checks what the issue asks of every rendering.
func checkRendered(t *testing.T, objs []any, namespace string, replicas int32, redis bool, settings map[string]bool) {
	t.Helper()
	var (
		dep       *appsv1.Deployment
		role      *rbacv1.Role
		policies  = map[string]*networkingv1.NetworkPolicy{}
		pdb       bool
		config    *corev1.ConfigMap
		redisSets int
	)
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && m.GetNamespace() != namespace {
			if _, isNS := o.(*corev1.Namespace); !isNS || m.GetName() != namespace {
				t.Errorf("%T %s is in namespace %q, want %q", o, m.GetName(), m.GetNamespace(), namespace)
			}
		}
		switch o := o.(type) {
		case *appsv1.Deployment:
			dep = o
		case *rbacv1.Role:
			role = o
		case *networkingv1.NetworkPolicy:
			policies[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			pdb = true
		case *corev1.ConfigMap:
			config = o
		case *appsv1.StatefulSet:
			redisSets++
		}
	}
	if dep == nil || role == nil || config == nil || !pdb {
		t.Fatalf("rendering lacks the Deployment, Role, ConfigMap or PodDisruptionBudget")
	}

	// The Role is rbac.yaml's: exactly the verbs the backend uses.
	granted := map[string][]string{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			granted[res] = slices.Sorted(slices.Values(append(granted[res], r.Verbs...)))
		}
	}
	want := map[string][]string{}
	for res, verbs := range kubernetes.APIVerbs {
		want[res] = slices.Sorted(slices.Values(verbs))
	}
	if !maps.EqualFunc(granted, want, slices.Equal[[]string]) {
		t.Errorf("Role grants %v, the backend uses %v", granted, want)
	}

	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != replicas {
		t.Errorf("gateway replicas %v, want %d", dep.Spec.Replicas, replicas)
	}
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != "sandgate" || len(pod.TopologySpreadConstraints) == 0 {
		t.Errorf("gateway Pod: service account %q, %d spread constraints", pod.ServiceAccountName, len(pod.TopologySpreadConstraints))
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil {
		t.Errorf("gateway Pod security context %+v: want runAsNonRoot and a seccomp profile", sc)
	}
	c := pod.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("gateway probes: readiness %+v, liveness %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("gateway container security context %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("gateway resources %+v: want a CPU request and a memory limit", c.Resources)
	}

	// Every setting is one the gateway knows (a typo would be ignored).
	names := slices.Collect(maps.Keys(config.Data))
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "SANDGATE_") && !settings[n] {
			t.Errorf("%s is not a gateway setting (gateway -h)", n)
		}
	}
	if config.Data["SANDGATE_BACKEND"] != "kubernetes" {
		t.Errorf("backend %q, want kubernetes", config.Data["SANDGATE_BACKEND"])
	}
	// Clients authenticate: API keys from a Secret, never --insecure.
	if v, ok := config.Data["SANDGATE_INSECURE"]; ok {
		t.Errorf("SANDGATE_INSECURE=%s in the ConfigMap", v)
	}
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SANDGATE_AUTH_API_KEYS" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
		t.Errorf("SANDGATE_AUTH_API_KEYS does not come from a Secret: %+v", c.Env)
	}

	// Only gateway Pods reach sandbox Pods; sandboxes reach no private range.
	np := policies["sandgate-sandboxes"]
	if np == nil {
		t.Fatal("no sandbox NetworkPolicy")
	}
	if np.Spec.PodSelector.MatchLabels[backend.LabelManagedBy] != backend.ManagedByValue ||
		!slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) ||
		len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		np.Spec.Ingress[0].From[0].PodSelector == nil ||
		np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != dep.Spec.Selector.MatchLabels["app.kubernetes.io/name"] {
		t.Errorf("sandbox NetworkPolicy does not limit ingress to gateway Pods: %+v", np.Spec)
	}
	// Egress is denied here: NetworkPolicies add up, and each sandbox Pod's
	// own policy (the backend's) opens what its egress mode allows.
	if len(np.Spec.Egress) != 0 {
		t.Errorf("sandbox NetworkPolicy opens egress for every sandbox: %+v", np.Spec.Egress)
	}
	if got := redisSets == 1; got != redis {
		t.Errorf("%d Redis StatefulSets, want in-cluster Redis %v", redisSets, redis)
	}
}

// adminToken is a token with cluster-admin, for kubectl: a ServiceAccount
// bound to the bootstrap cluster-admin ClusterRole.
func adminToken(t *testing.T, api *testutil.KubeAPI) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const ns, name = "kube-system", "deploy-validator"
	_, err := api.Admin.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = api.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := api.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// run runs a command and returns its stdout; a failure fails the test with
// its stderr.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// knownSettings is every SANDGATE_* environment variable `gateway -h` lists.
func knownSettings(t *testing.T) map[string]bool {
	t.Helper()
	cmd := exec.Command(testutil.GatewayBinary(t), "-h")
	out, _ := cmd.CombinedOutput() // -h exits 0 or 2 depending on the flag package; the text is what counts
	known := map[string]bool{}
	for _, f := range strings.FieldsFunc(string(out), func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == '\n' || r == '\t' }) {
		if strings.HasPrefix(f, "SANDGATE_") {
			known[f] = true
		}
	}
	if len(known) < 20 {
		t.Fatalf("gateway -h lists %d settings:\n%s", len(known), out)
	}
	return known
}
