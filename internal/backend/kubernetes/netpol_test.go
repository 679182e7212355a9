package kubernetes

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sandgate/sandgate/internal/backend"
)

func TestEgressPassword(t *testing.T) {
	t.Parallel()
	a, b := EgressPassword("secret-a"), EgressPassword("secret-b")
	if a != EgressPassword("secret-a") {
		t.Error("not deterministic: the proxy could not check it")
	}
	if a == b || len(a) != 43 || strings.Contains(a, "secret") {
		t.Errorf("EgressPassword = %q, %q: want distinct 256-bit base64url values that do not show the secret", a, b)
	}
	// Pinned: the gateway's proxy and the Pods of an older gateway must agree.
	if got := EgressPassword("s"); got != "Vi7wLM_kz44xakl3wINMk56hOg26FhQX2JsKGRnAhhY" {
		t.Errorf("EgressPassword(s) = %s: the derivation changed", got)
	}
}

func TestPodEgress(t *testing.T) {
	t.Parallel()
	k := newForSpec(t, Config{})
	proxied := "http://0123456789abcdef:" + EgressPassword("s3cret") + "@sandgate-egress.team-a.svc.cluster.local:3128"
	tests := []struct {
		egress  backend.Egress
		secret  string
		label   string
		proxy   string // HTTP_PROXY; "" = no proxy variables at all
		allow   string
		wantErr string
	}{
		{egress: backend.Egress{}, secret: "s3cret", label: "proxy", proxy: proxied, allow: "null"},
		{egress: backend.Egress{Mode: backend.EgressProxy, Allow: []string{"pypi.org", "*.github.com:443"}}, secret: "s3cret",
			label: "proxy", proxy: proxied, allow: `["pypi.org","*.github.com:443"]`},
		{egress: backend.Egress{Mode: backend.EgressNone}, label: "none", allow: "null"},
		{egress: backend.Egress{Mode: backend.EgressOpen}, secret: "s3cret", label: "open", allow: "null"},
		{egress: backend.Egress{Mode: backend.EgressProxy}, wantErr: "needs the sandbox's secret"},
		{egress: backend.Egress{Mode: "vpn"}, secret: "s3cret", wantErr: "not none, proxy or open"},
		{egress: backend.Egress{Allow: []string{"http://x"}}, secret: "s3cret", wantErr: "egress allow"},
	}
	for _, tt := range tests {
		t.Run(string(tt.egress.Mode)+tt.label+tt.wantErr, func(t *testing.T) {
			t.Parallel()
			spec := testSpec()
			spec.Egress, spec.Secret = tt.egress, tt.secret
			spec.Env["HTTP_PROXY"] = "http://elsewhere:1" // the mode's value wins
			pod, err := k.podFor(spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("podFor = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pod.Labels[LabelEgress] != tt.label || pod.Annotations[AnnotationEgressAllow] != tt.allow {
				t.Errorf("label %q annotation %q, want %q %q", pod.Labels[LabelEgress], pod.Annotations[AnnotationEgressAllow], tt.label, tt.allow)
			}
			env := map[string]string{}
			for _, e := range pod.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			want := map[string]string{"A_VAR": "1", "B_VAR": "2", "HTTP_PROXY": "http://elsewhere:1"}
			if tt.proxy != "" {
				maps.Copy(want, backend.ProxyEnv(tt.proxy))
			}
			if !maps.Equal(env, want) {
				t.Errorf("env = %v\nwant %v", env, want)
			}
			if tt.proxy != "" && strings.Contains(env["HTTP_PROXY"], "s3cret") {
				t.Error("the sandbox's secret itself is in the Pod's env")
			}
		})
	}
}

func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandgate-sandbox-0123456789abcdef", UID: types.UID("uid-1"), Labels: map[string]string{
		backend.LabelManagedBy: "sandgate", backend.LabelSandboxID: "0123456789abcdef", backend.LabelUser: "alice", "team": "x",
	}}}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p int32, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(p)
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
	}
	dns := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{port(53, udp), port(53, tcp)},
	}
	gateway := func(labels map[string]string, p int32) networkingv1.NetworkPolicyEgressRule {
		return networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: labels}}},
			Ports: []networkingv1.NetworkPolicyPort{port(p, tcp)},
		}
	}
	public := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{
			"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10", "::1/128"}}},
	}}
	defaultGateway := map[string]string{"app.kubernetes.io/name": "sandgate-gateway"}
	tests := []struct {
		name string
		mode string // the Pod's label
		cfg  Config
		want []networkingv1.NetworkPolicyEgressRule
	}{
		{"none", "none", Config{}, nil},
		{"proxy by service name", "proxy", Config{}, []networkingv1.NetworkPolicyEgressRule{gateway(defaultGateway, 3128), dns}},
		{"proxy by ip", "proxy", Config{EgressProxyURL: "http://10.96.0.50:3128", EgressProxyPort: 8128, GatewayPodLabels: map[string]string{"app": "gw"}},
			[]networkingv1.NetworkPolicyEgressRule{gateway(map[string]string{"app": "gw"}, 8128)}},
		{"open", "open", Config{}, []networkingv1.NetworkPolicyEgressRule{dns, public}},
		{"unknown mode is closed", "", Config{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := newForSpec(t, tt.cfg)
			p := pod.DeepCopy()
			if tt.mode != "" {
				p.Labels[LabelEgress] = tt.mode
			}
			np := k.policyFor(p)
			if np.Name != p.Name || !maps.Equal(np.Labels, p.Labels) {
				t.Errorf("name %s labels %v, want the Pod's", np.Name, np.Labels)
			}
			if o := np.OwnerReferences; len(o) != 1 || o[0].UID != "uid-1" || o[0].Kind != "Pod" || !*o[0].Controller {
				t.Errorf("owner refs = %+v, want the Pod", o)
			}
			if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
				t.Errorf("policy types %v, ingress %v: want Egress only", np.Spec.PolicyTypes, np.Spec.Ingress)
			}
			wantSel := map[string]string{backend.LabelManagedBy: "sandgate", backend.LabelSandboxID: "0123456789abcdef", LabelEgress: tt.mode}
			if !maps.Equal(np.Spec.PodSelector.MatchLabels, wantSel) || np.Spec.PodSelector.MatchExpressions != nil {
				t.Errorf("pod selector = %+v, want %v", np.Spec.PodSelector, wantSel)
			}
			if np.Spec.Egress == nil || len(np.Spec.Egress) != len(tt.want) || (len(tt.want) > 0 && !reflect.DeepEqual(np.Spec.Egress, tt.want)) {
				t.Errorf("egress =\n%+v\nwant\n%+v", np.Spec.Egress, tt.want)
			}
			// The selector picks this Pod in its mode, and not the same
			// sandbox id in another mode.
			sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
			other := maps.Clone(p.Labels)
			other[LabelEgress] = "something-else"
			if sel.Matches(labels.Set(p.Labels)) != (tt.mode != "") || sel.Matches(labels.Set(other)) {
				t.Errorf("selector %s: matches its Pod %v, another mode's %v", sel, sel.Matches(labels.Set(p.Labels)), sel.Matches(labels.Set(other)))
			}
		})
	}
}
