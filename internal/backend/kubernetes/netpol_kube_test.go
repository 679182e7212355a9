package kubernetes

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestNetworkPolicyDryRun has the real API server validate and default
// each mode's policy (dry run, as the backend's ServiceAccount: the Role
// must allow it) and checks that what it accepted is what the mode means.
func TestNetworkPolicyDryRun(t *testing.T) {
	t.Parallel()
	api := testutil.StartKubeAPIServer(t)
	ns := api.Namespace(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", api.Kubeconfig(t, api.ApplyRBAC(t, ns, rbacManifest), ns))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg).NetworkingV1().NetworkPolicies(ns)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandgate-sandbox-0123456789abcdef", UID: types.UID("7d3c1f0e-1111-4222-8333-944445555666"),
		Labels: map[string]string{backend.LabelManagedBy: "sandgate", backend.LabelSandboxID: "0123456789abcdef"}}}

	// check is what each mode must come to, read off the stored spec.
	gatewayOnly := func(t *testing.T, r networkingv1.NetworkPolicyEgressRule, port int32) {
		if len(r.To) != 1 || r.To[0].PodSelector == nil || r.To[0].NamespaceSelector != nil || r.To[0].IPBlock != nil ||
			!maps.Equal(r.To[0].PodSelector.MatchLabels, DefaultGatewayPodLabels) ||
			len(r.Ports) != 1 || *r.Ports[0].Protocol != corev1.ProtocolTCP || r.Ports[0].Port.IntVal != port {
			t.Errorf("proxy rule = %+v, want the gateway Pods on TCP %d only", r, port)
		}
	}
	isDNS := func(r networkingv1.NetworkPolicyEgressRule) bool {
		return len(r.To) == 1 && r.To[0].PodSelector != nil && r.To[0].PodSelector.MatchLabels["k8s-app"] == "kube-dns" &&
			len(r.Ports) == 2 && r.Ports[0].Port.IntVal == 53 && r.Ports[1].Port.IntVal == 53
	}
	tests := []struct {
		mode  backend.EgressMode
		cfg   Config
		check func(t *testing.T, rules []networkingv1.NetworkPolicyEgressRule)
	}{
		{backend.EgressNone, Config{}, func(t *testing.T, rules []networkingv1.NetworkPolicyEgressRule) {
			if len(rules) != 0 {
				t.Errorf("none: egress %+v, want none at all", rules)
			}
		}},
		{backend.EgressProxy, Config{}, func(t *testing.T, rules []networkingv1.NetworkPolicyEgressRule) {
			if len(rules) != 2 || !isDNS(rules[1]) {
				t.Fatalf("proxy by name: egress %+v, want the gateway and DNS", rules)
			}
			gatewayOnly(t, rules[0], 3128)
		}},
		{backend.EgressProxy, Config{EgressProxyURL: "http://10.0.0.9:3128", EgressProxyPort: 8128}, func(t *testing.T, rules []networkingv1.NetworkPolicyEgressRule) {
			if len(rules) != 1 {
				t.Fatalf("proxy by IP: egress %+v, want the gateway only, no DNS", rules)
			}
			gatewayOnly(t, rules[0], 8128)
		}},
		{backend.EgressOpen, Config{}, func(t *testing.T, rules []networkingv1.NetworkPolicyEgressRule) {
			if len(rules) != 2 || !isDNS(rules[0]) || len(rules[1].To) != 2 || len(rules[1].Ports) != 0 {
				t.Fatalf("open: egress %+v, want DNS and the public ranges on any port", rules)
			}
			v4, v6 := rules[1].To[0].IPBlock, rules[1].To[1].IPBlock
			if v4 == nil || v4.CIDR != "0.0.0.0/0" || len(v4.Except) != 6 || v4.Except[4] != "169.254.0.0/16" ||
				v6 == nil || v6.CIDR != "::/0" || len(v6.Except) != 3 {
				t.Errorf("open: address blocks %+v %+v", v4, v6)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode)+tt.cfg.EgressProxyURL, func(t *testing.T) {
			k := newForSpec(t, tt.cfg)
			p := pod.DeepCopy()
			p.Labels[LabelEgress] = string(tt.mode)
			want := k.policyFor(p)
			got, err := client.Create(t.Context(), want, dryRun)
			if err != nil {
				t.Fatalf("API server refused the %s policy: %v", tt.mode, err)
			}
			if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
				t.Errorf("accepted spec differs from the rendered one:\n%+v\n%+v", got.Spec, want.Spec)
			}
			if !maps.Equal(got.Labels, p.Labels) || len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != p.UID {
				t.Errorf("accepted metadata = %+v", got.ObjectMeta)
			}
			sel, err := metav1.LabelSelectorAsSelector(&got.Spec.PodSelector)
			if err != nil || !sel.Matches(labels.Set(p.Labels)) ||
				!slices.Equal(got.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
				t.Errorf("selector %v (%v), types %v: want this Pod, egress only", sel, err, got.Spec.PolicyTypes)
			}
			tt.check(t, got.Spec.Egress)
			if _, err := client.Get(t.Context(), want.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("dry run stored the policy: %v", err)
			}
		})
	}

	// The dry run is validated: a bad port is refused, not echoed back.
	bad := newForSpec(t, Config{}).policyFor(pod)
	badPort := intstr.FromInt32(70000)
	bad.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &badPort}}}}
	if _, err := client.Create(t.Context(), bad, dryRun); !apierrors.IsInvalid(err) {
		t.Errorf("dry run of port 70000 = %v, want Invalid", err)
	}
}

// TestCreateInProxyMode: Create makes the Pod with the proxy environment and
// its policy next to it, EgressIdentity knows the Pod by its password, and
// Destroy takes the policy with the Pod.
func TestCreateInProxyMode(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t)
	k := e.backend(t, e.config())
	s := spec("frank", "t")
	s.Egress = backend.Egress{Mode: backend.EgressProxy, Allow: []string{"pypi.org"}}
	info := backendtest.MustCreate(t, k, s)
	name := podName(s.SandboxID)

	pod, _ := e.pod(t, name)
	if pod == nil || pod.Labels[LabelEgress] != "proxy" {
		t.Fatalf("pod = %+v", pod)
	}
	wantProxy := "http://" + s.SandboxID + ":" + EgressPassword(s.Secret) + "@sandgate-egress." + e.ns + ".svc.cluster.local:3128"
	env := map[string]string{}
	for _, v := range pod.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	for n, v := range backend.ProxyEnv(wantProxy) {
		if env[n] != v {
			t.Errorf("pod env %s = %q, want %q", n, env[n], v)
		}
	}
	// The sandbox sees it too (the kubelet passes the Pod's env).
	if out := backendtest.Exec(t, info, "echo $HTTPS_PROXY").Output; out != wantProxy+"\n" {
		t.Errorf("HTTPS_PROXY in the sandbox = %q", out)
	}

	np, ok := e.policy(t, name)
	if !ok {
		t.Fatal("no network policy")
	}
	sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if !ownedBy(np, pod.UID) || !sel.Matches(labels.Set(pod.Labels)) || len(np.Spec.Egress) != 2 ||
		np.Spec.Egress[0].Ports[0].Port.IntVal != 3128 {
		t.Errorf("stored policy = %+v", np)
	}

	// The pod object as the kubelet has it now: with its address.
	pod, _ = e.pod(t, name)
	podIP := netip.MustParseAddr(pod.Status.PodIP)
	id, err := k.EgressIdentity(t.Context(), s.SandboxID, EgressPassword(s.Secret), podIP)
	if err != nil || id.SandboxID != s.SandboxID || id.User != "frank" || id.Thread != "t" ||
		id.Egress.Mode != backend.EgressProxy || !slices.Equal(id.Egress.Allow, []string{"pypi.org"}) {
		t.Errorf("EgressIdentity = %+v, %v", id, err)
	}
	for _, c := range [][2]string{{s.SandboxID, "wrong"}, {s.SandboxID, ""}, {s.SandboxID, s.Secret}, {"00000000000000ff", EgressPassword(s.Secret)}} {
		if _, err := k.EgressIdentity(t.Context(), c[0], c[1], podIP); !errors.Is(err, ErrEgressDenied) {
			t.Errorf("EgressIdentity(%s, %s) = %v, want denied", c[0], c[1], err)
		}
	}
	// The right password from anywhere but the Pod: a leaked credential.
	for _, elsewhere := range []string{"127.0.0.1", e.node.IP, podIP.Next().String()} {
		if _, err := k.EgressIdentity(t.Context(), s.SandboxID, EgressPassword(s.Secret), netip.MustParseAddr(elsewhere)); !errors.Is(err, ErrEgressDenied) {
			t.Errorf("EgressIdentity from %s = %v, want denied", elsewhere, err)
		}
	}

	if err := k.Destroy(backendtest.Ctx(t), info); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.policy(t, name); ok {
		t.Error("network policy left after Destroy")
	}
	backendtest.Eventually(t, "the proxy forgets the sandbox", func() bool {
		_, err := k.EgressIdentity(t.Context(), s.SandboxID, EgressPassword(s.Secret), podIP)
		return errors.Is(err, ErrEgressDenied)
	})
}
