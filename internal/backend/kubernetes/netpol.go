package kubernetes

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// Egress on Kubernetes: NetworkPolicies are additive, so the shipped base
// policy (deployments/kubernetes/base/networkpolicy.yaml) denies every
// sandbox Pod all egress, and each Pod's own policy, made with it, opens
// what its mode allows. A Pod is never more open than its mode, and a Pod
// whose policy is not there yet is closed, not open.
const (
	// LabelEgress is the Pod's egress mode. Its policy selects it too, so a
	// policy an earlier Pod of the same name left behind (the garbage
	// collector lags) cannot open a Pod of another mode.
	LabelEgress = "sandgate.egress"
	// AnnotationEgressAllow is the Pod's allow-list (JSON), which
	// EgressIdentity hands the proxy.
	AnnotationEgressAllow = "sandgate.egress-allow"
)

// egressPasswordLabel keys the derivation of the proxy password: a
// different label would make a different, unrelated password.
const egressPasswordLabel = "sandgate egress proxy password v1"

// EgressPassword is the egress proxy password of the sandbox whose secret
// is secret: HMAC-SHA256(secret, a fixed label), base64url. A Pod gets no
// channel its code cannot read (the Pod spec, its environment and
// /proc/1/environ are all visible to it), so it gets this one-way
// derivation in its proxy URL, never the secret itself: code in the
// sandbox, or anyone who may read Pods, learns how to use the proxy as
// that sandbox and nothing more.
func EgressPassword(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(egressPasswordLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ErrEgressDenied: no proxy-mode sandbox Pod of that id has that password.
var ErrEgressDenied = errors.New("egress proxy: unknown sandbox or wrong password")

// egressEnv is the environment of a Pod in the spec's mode: the proxy
// variables, with sandboxID:EgressPassword as credentials, in proxy mode;
// nothing in the others (none has no way out, open needs no proxy).
func (k *Kubernetes) egressEnv(spec backend.Spec) (map[string]string, error) {
	if spec.Egress.EffectiveMode() != backend.EgressProxy {
		return nil, nil
	}
	if spec.Secret == "" {
		// The password would be the same for everyone who knows the id.
		return nil, errors.New("egress mode proxy needs the sandbox's secret for its proxy password")
	}
	u, err := url.Parse(k.proxyURL)
	if err != nil {
		return nil, fmt.Errorf("egress proxy url: %w", err)
	}
	u.User = url.UserPassword(spec.SandboxID, EgressPassword(spec.Secret))
	u.Path = ""
	return backend.ProxyEnv(u.String()), nil
}

// policyFor is the Pod's own NetworkPolicy: owned by it (garbage collected
// with it; remove deletes it at once too), named and labelled like it,
// selecting it alone, and allowing the egress of the mode on its label.
func (k *Kubernetes) policyFor(pod *corev1.Pod) *networkingv1.NetworkPolicy {
	mode := backend.EgressMode(pod.Labels[LabelEgress])
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Labels:          maps.Clone(pod.Labels),
			OwnerReferences: ownerRefs(pod),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				backend.LabelManagedBy: backend.ManagedByValue,
				backend.LabelSandboxID: pod.Labels[backend.LabelSandboxID],
				LabelEgress:            string(mode),
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      k.egressRules(mode),
		},
	}
}

// egressRules allow what mode allows; an unknown mode, nothing.
//   - none: nothing, not even DNS.
//   - proxy: the gateway Pods' proxy port, plus DNS only when the proxy URL
//     names a host (the proxy resolves everything else for the Pod).
//   - open: DNS and the public internet.
func (k *Kubernetes) egressRules(mode backend.EgressMode) []networkingv1.NetworkPolicyEgressRule {
	switch mode {
	case backend.EgressProxy:
		rules := []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(k.cfg.GatewayPodLabels)}}},
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(k.cfg.EgressProxyPort)},
		}}
		if k.proxyNeedsDNS() {
			rules = append(rules, dnsRule())
		}
		return rules
	case backend.EgressOpen:
		return []networkingv1.NetworkPolicyEgressRule{dnsRule(), publicRule()}
	default:
		return []networkingv1.NetworkPolicyEgressRule{}
	}
}

// proxyNeedsDNS: the proxy URL's host is a name the Pod must resolve.
func (k *Kubernetes) proxyNeedsDNS() bool {
	u, err := url.Parse(k.proxyURL)
	return err != nil || net.ParseIP(u.Hostname()) == nil
}

func tcpPort(port int) networkingv1.NetworkPolicyPort {
	p := intstr.FromInt32(int32(port))
	return networkingv1.NetworkPolicyPort{Protocol: new(corev1.ProtocolTCP), Port: &p}
}

// dnsRule reaches the cluster DNS (kube-dns, CoreDNS's usual labels).
func dnsRule() networkingv1.NetworkPolicyEgressRule {
	dns := intstr.FromInt32(53)
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: new(corev1.ProtocolUDP), Port: &dns},
			{Protocol: new(corev1.ProtocolTCP), Port: &dns},
		},
	}
}

// Private, CGNAT, link-local (cloud metadata) and loopback ranges: Pod,
// Service and node networks live there. Open mode reaches everything else.
var (
	privateV4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}
	privateV6 = []string{"fc00::/7", "fe80::/10", "::1/128"}
)

func publicRule() networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: privateV4}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: privateV6}},
	}}
}

// EgressIdentity authenticates a connection to the egress proxy that
// presented sandboxID:password (Proxy-Authorization Basic) from source and
// says whose it is, from the sandbox's Pod in the informer's cache: every
// gateway replica knows every sandbox this way, after a restart too, with no
// API request per connection. A Pod the cache has not seen yet is denied (a
// Pod's code runs well after the watch event of its creation).
// ErrEgressDenied unless a live proxy-mode Pod of that id, at the address
// source, has that password: a password that leaked out of its Pod (a log,
// a shared notebook) is worth nothing elsewhere.
func (k *Kubernetes) EgressIdentity(ctx context.Context, sandboxID, password string, source netip.Addr) (backend.EgressIdentity, error) {
	if !identity.ValidSandboxID(sandboxID) {
		return backend.EgressIdentity{}, ErrEgressDenied
	}
	if err := k.pods.synced(ctx); err != nil {
		return backend.EgressIdentity{}, err
	}
	// The proxy credential names the Pod's runtime id, which a claim keeps.
	pod := k.pods.get(k.name(sandboxID))
	if pod == nil || !k.ours(pod) || pod.Labels[LabelEgress] != string(backend.EgressProxy) ||
		!live(pod) || !proxyPasswordIs(pod, sandboxID, password) || !podAt(pod, source) {
		return backend.EgressIdentity{}, ErrEgressDenied
	}
	e := backend.Egress{Mode: backend.EgressProxy}
	if a := pod.Annotations[AnnotationEgressAllow]; a != "" {
		if err := json.Unmarshal([]byte(a), &e.Allow); err != nil {
			return backend.EgressIdentity{}, fmt.Errorf("pod %s: bad %s: %w", pod.Name, AnnotationEgressAllow, err)
		}
	}
	return backend.EgressIdentity{
		SandboxID: sandboxOf(pod), User: pod.Annotations[AnnotationUser], Thread: pod.Annotations[AnnotationThread], Egress: e,
	}, nil
}

// podAt: source is one of the Pod's addresses.
func podAt(pod *corev1.Pod, source netip.Addr) bool {
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a == source {
			return true
		}
	}
	return false
}

// proxyPasswordIs: the Pod's proxy URL carries sandboxID:password.
func proxyPasswordIs(pod *corev1.Pod, sandboxID, password string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name != "HTTP_PROXY" {
				continue
			}
			u, err := url.Parse(e.Value)
			if err != nil || u.User == nil || u.User.Username() != sandboxID {
				return false
			}
			want, _ := u.User.Password()
			return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(password)) == 1
		}
	}
	return false
}
