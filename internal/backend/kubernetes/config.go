package kubernetes

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// URL modes: how the gateway reaches a sandbox.
const (
	// URLService is the Service's cluster DNS name: the gateway runs in the cluster.
	URLService = "service"
	// URLNodePort is NodeHost plus the Service's nodePort: the gateway runs
	// outside the cluster (DeerFlow's provisioner always does this).
	URLNodePort = "nodeport"
	// URLPodIP is the Pod's IP: in-cluster, without a DNS lookup per new sandbox.
	URLPodIP = "pod-ip"
)

// URLModes lists the accepted Config.URLMode values.
var URLModes = []string{URLService, URLNodePort, URLPodIP}

// Defaults for the zero values of Config. The resource defaults are
// DeerFlow's provisioner's fixed values, here only a starting point.
const (
	DefaultPodPrefix     = "sandgate-sandbox"
	DefaultPort          = 8080
	DefaultClusterDomain = "cluster.local"
	DefaultCPURequest    = "100m"
	DefaultCPULimit      = "1"
	DefaultMemoryRequest = "256Mi"
	DefaultMemoryLimit   = "1Gi"
	// DefaultEgressService is the gateway's egress proxy Service that the
	// default EgressProxyURL names (deployments/kubernetes/base/gateway.yaml).
	DefaultEgressService = "sandgate-egress"
	// DefaultEgressProxyPort is the gateway container's egress proxy port.
	DefaultEgressProxyPort = sandboxspec.EgressPort
)

// DefaultGatewayPodLabels select the gateway's Pods (the Deployment in
// deployments/kubernetes/base/gateway.yaml).
var DefaultGatewayPodLabels = map[string]string{"app.kubernetes.io/name": "sandgate-gateway"}

// Config of the kubernetes backend. The zero value plus Image is usable
// in a cluster (in-cluster credentials, the Pod's own namespace). Errors
// name the gateway's settings (image, kubernetes_url_mode, ...).
type Config struct {
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster service account.
	Kubeconfig string
	// Namespace for sandbox Pods; "" is the kubeconfig context's namespace,
	// or in a cluster the gateway's own, else "default".
	Namespace string
	// PodPrefix names Pods and Services {PodPrefix}-{sandbox_id}.
	PodPrefix string
	// Image of the sandbox container; its entrypoint must serve the sandbox
	// API on Port (Sandgate's sandbox image, or the all-in-one image). Required.
	Image string
	// Port the sandbox API listens on in the container. 0 = 8080.
	Port int
	// URLMode is service (default), nodeport or pod-ip.
	URLMode string
	// NodeHost is the address of a node, for URLMode nodeport.
	NodeHost string
	// ClusterDomain completes Service DNS names. "" = cluster.local.
	ClusterDomain string

	// Resources as Kubernetes quantities; "" takes the defaults above.
	CPURequest, CPULimit, MemoryRequest, MemoryLimit string
	// RuntimeClass, e.g. gvisor or kata, for a stronger boundary than runc.
	RuntimeClass string
	NodeSelector map[string]string
	Tolerations  []Toleration
	// ImagePullPolicy is Always, IfNotPresent or Never; "" is Kubernetes' default.
	ImagePullPolicy  string
	ImagePullSecrets []string
	// ActiveDeadline ends a Pod that outlived every reaper (a backstop for
	// sandboxes orphaned while no gateway ran), in whole seconds. 0 = none.
	ActiveDeadline time.Duration
	// RunAsNonRoot makes the kubelet refuse images that run as root.
	RunAsNonRoot bool
	// RunAsUser and RunAsGroup are the uid and gid the sandbox's processes
	// run as (0 = the image's USER); FSGroup owns the Pod's volumes and is
	// every process's supplementary group (0 = none). Under the restricted
	// Pod Security Standard set RunAsUser and RunAsNonRoot.
	RunAsUser, RunAsGroup, FSGroup int
	// ReadOnlyRootFS mounts the image read-only; /tmp is an emptyDir then.
	ReadOnlyRootFS bool
	// Server is the path of Sandgate's sandbox server in Image (the images
	// of deployments/sandbox-image have it at /sandgate-sandbox). Set, each
	// Pod runs it with a secret of its own (secret.go) and the backend offers
	// what that server does for it: freeze and stats. "" = another image (the
	// all-in-one sandbox): its entrypoint runs, the shared sandbox_api_key
	// applies, and those features answer 501.
	Server string

	// User data (/mnt/user-data/{workspace,uploads,outputs}) lives on the PVC
	// UserDataPVC, or under the node directory UserDataHostPath, at
	// users/{user}/threads/{thread}/user-data — the layout of data_dir, so
	// the same volume can back the gateway's data dir. Neither: an emptyDir,
	// lost with the sandbox.
	UserDataPVC      string
	UserDataHostPath string
	// SharedDataDir: the gateway's data_dir is the root of that same volume
	// (the PVC mounted in the gateway Pods too, or the node directory of a
	// gateway on the node), so the gateway reaches every thread's files and
	// checkpoints, restore and fork work as with docker; the checkpoints
	// live on the volume, where every replica finds them.
	SharedDataDir bool
	// Skills are mounted read-only at /mnt/skills from a PVC or a node directory.
	SkillsPVC      string
	SkillsHostPath string

	// Instance is the gateway instance id recorded in the labels (optional).
	Instance string

	// Egress (netpol.go). Each sandbox Pod gets a NetworkPolicy of its own
	// for its Spec.Egress mode. EgressProxyURL is where proxy-mode Pods reach
	// the gateway's egress proxy: http://host:port, no credentials (the Pod's
	// are added per sandbox). "" = http://sandgate-egress.{namespace}.svc.
	// {cluster domain}:3128. A host name costs the Pod a DNS rule (to
	// kube-dns); an IP address (the Service's ClusterIP) spares it.
	EgressProxyURL string
	// GatewayPodLabels select the gateway Pods, which serve the proxy, in
	// the sandbox namespace. nil = DefaultGatewayPodLabels.
	GatewayPodLabels map[string]string
	// EgressProxyPort is the proxy's port on the gateway Pods (the container
	// port, which NetworkPolicies see, not the Service's). 0 = 3128.
	EgressProxyPort int
}

// Toleration is a Pod toleration. An empty Operator is Equal.
type Toleration struct {
	Key, Operator, Value, Effect string
}

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&c.PodPrefix, DefaultPodPrefix)
	def(&c.URLMode, URLService)
	def(&c.ClusterDomain, DefaultClusterDomain)
	def(&c.CPURequest, DefaultCPURequest)
	def(&c.CPULimit, DefaultCPULimit)
	def(&c.MemoryRequest, DefaultMemoryRequest)
	def(&c.MemoryLimit, DefaultMemoryLimit)
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.EgressProxyPort == 0 {
		c.EgressProxyPort = DefaultEgressProxyPort
	}
	if c.GatewayPodLabels == nil {
		c.GatewayPodLabels = maps.Clone(DefaultGatewayPodLabels)
	}
	return c
}

// egressProxyURL is the configured proxy URL, or the default Service's in
// namespace ns.
func (c Config) egressProxyURL(ns string) string {
	if c.EgressProxyURL != "" {
		return c.EgressProxyURL
	}
	host := DefaultEgressService + "." + ns + ".svc." + c.ClusterDomain
	return "http://" + net.JoinHostPort(host, strconv.Itoa(DefaultEgressProxyPort))
}

// Validate reports every configuration error at once.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	dns := func(setting, v string, check func(string) []string) {
		if msgs := check(v); len(msgs) > 0 {
			bad("%s: %q: %s", setting, v, strings.Join(msgs, "; "))
		}
	}
	if c.Image == "" {
		bad("image: must be set")
	}
	// Service names are DNS-1035 labels of at most 63 characters, and the
	// name is the prefix plus "-" plus the 16-character sandbox id.
	if msgs := validation.IsDNS1035Label(c.PodPrefix + "-0123456789abcdef"); len(msgs) > 0 {
		bad("container_prefix: %q cannot start a Pod and Service name: %s", c.PodPrefix, strings.Join(msgs, "; "))
	}
	if c.Namespace != "" {
		dns("kubernetes_namespace", c.Namespace, validation.IsDNS1123Label)
	}
	if c.Port < 1 || c.Port > 65535 {
		bad("port: %d is not a TCP port", c.Port)
	}
	if !slices.Contains(URLModes, c.URLMode) {
		bad("kubernetes_url_mode: %q is not one of %s", c.URLMode, strings.Join(URLModes, ", "))
	}
	if c.URLMode == URLNodePort && c.NodeHost == "" {
		bad("kubernetes_node_host: must be set for url mode nodeport")
	}
	if c.NodeHost != "" && net.ParseIP(c.NodeHost) == nil && len(validation.IsDNS1123Subdomain(c.NodeHost)) > 0 {
		bad("kubernetes_node_host: %q is not a host name or IP address", c.NodeHost)
	}
	dns("kubernetes_cluster_domain", c.ClusterDomain, validation.IsDNS1123Subdomain)
	quantities := map[string]string{
		"kubernetes_cpu_request": c.CPURequest, "kubernetes_cpu_limit": c.CPULimit,
		"kubernetes_memory_request": c.MemoryRequest, "kubernetes_memory_limit": c.MemoryLimit,
	}
	parsed := map[string]resource.Quantity{}
	for _, setting := range slices.Sorted(maps.Keys(quantities)) {
		q, err := resource.ParseQuantity(quantities[setting])
		if err != nil {
			bad("%s: %q is not a Kubernetes quantity", setting, quantities[setting])
			continue
		}
		parsed[setting] = q
	}
	for _, kind := range []string{"cpu", "memory"} {
		req, okr := parsed["kubernetes_"+kind+"_request"]
		lim, okl := parsed["kubernetes_"+kind+"_limit"]
		if okr && okl && req.Cmp(lim) > 0 {
			bad("kubernetes_%s_request: %s exceeds the limit %s", kind, req.String(), lim.String())
		}
	}
	if c.RuntimeClass != "" {
		dns("kubernetes_runtime_class", c.RuntimeClass, validation.IsDNS1123Subdomain)
	}
	switch corev1.PullPolicy(c.ImagePullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		bad("kubernetes_image_pull_policy: %q is not Always, IfNotPresent or Never", c.ImagePullPolicy)
	}
	for _, s := range c.ImagePullSecrets {
		dns("kubernetes_image_pull_secrets", s, validation.IsDNS1123Subdomain)
	}
	for k, v := range c.NodeSelector {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(msgs) > 0 {
			bad("kubernetes_node_selector: %s=%s: %s", k, v, strings.Join(msgs, "; "))
		}
	}
	if c.EgressProxyURL != "" {
		if err := validProxyURL(c.EgressProxyURL); err != nil {
			bad("kubernetes_egress_proxy_url: %q: %v", c.EgressProxyURL, err)
		}
	}
	if c.EgressProxyPort < 1 || c.EgressProxyPort > 65535 {
		bad("kubernetes_egress_proxy_port: %d is not a TCP port", c.EgressProxyPort)
	}
	if len(c.GatewayPodLabels) == 0 {
		bad("kubernetes_gateway_pod_labels: must select the gateway Pods")
	}
	for k, v := range c.GatewayPodLabels {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(msgs) > 0 {
			bad("kubernetes_gateway_pod_labels: %s=%s: %s", k, v, strings.Join(msgs, "; "))
		}
	}
	for _, t := range c.Tolerations {
		if err := t.validate(); err != nil {
			bad("kubernetes_tolerations: %v", err)
		}
	}
	if c.SharedDataDir && c.UserDataPVC == "" && c.UserDataHostPath == "" {
		bad("kubernetes_shared_data_dir: needs kubernetes_user_data_pvc or kubernetes_user_data_host_path (the volume data_dir is the root of)")
	}
	if c.Server != "" && (!path.IsAbs(c.Server) || path.Clean(c.Server) != c.Server) {
		bad("kubernetes_server: %q is not a clean absolute path", c.Server)
	}
	for setting, id := range map[string]int{"kubernetes_run_as_user": c.RunAsUser, "kubernetes_run_as_group": c.RunAsGroup, "kubernetes_fs_group": c.FSGroup} {
		if id < 0 || id > 1<<31-1 {
			bad("%s: %d is not a uid or gid", setting, id)
		}
	}
	if c.ActiveDeadline < 0 {
		bad("kubernetes_active_deadline: %v is negative", c.ActiveDeadline)
	}
	for _, v := range []struct{ what, pvc, host string }{
		{"user_data", c.UserDataPVC, c.UserDataHostPath},
		{"skills", c.SkillsPVC, c.SkillsHostPath},
	} {
		if v.pvc != "" && v.host != "" {
			bad("kubernetes_%s_pvc and kubernetes_%s_host_path: set one, not both", v.what, v.what)
		}
		if v.pvc != "" {
			dns("kubernetes_"+v.what+"_pvc", v.pvc, validation.IsDNS1123Subdomain)
		}
		if v.host != "" && (!path.IsAbs(v.host) || path.Clean(v.host) != v.host) {
			bad("kubernetes_%s_host_path: %q is not a clean absolute path", v.what, v.host)
		}
	}
	return errors.Join(errs...)
}

// validProxyURL accepts http://host:port with nothing else: the sandbox's
// credentials are added per Pod, and a path would be ignored by clients.
func validProxyURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("want http://host:port")
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return errors.New("want http://host:port with a port")
	}
	if h := u.Hostname(); net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 {
		return fmt.Errorf("%q is not a host name or IP address", h)
	}
	return nil
}

func (t Toleration) validate() error {
	switch corev1.TolerationOperator(t.Operator) {
	case "", corev1.TolerationOpEqual:
		if t.Key == "" {
			return errors.New("an empty key needs operator Exists")
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			return fmt.Errorf("%s: operator Exists takes no value", t.Key)
		}
	default:
		return fmt.Errorf("%s: operator %q is not Equal or Exists", t.Key, t.Operator)
	}
	if t.Key != "" {
		if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			return fmt.Errorf("key %q: %s", t.Key, strings.Join(msgs, "; "))
		}
	}
	switch corev1.TaintEffect(t.Effect) {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return fmt.Errorf("%s: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
	}
	return nil
}

// ParseTolerations reads the compact form of the kubernetes_tolerations
// setting: comma-separated `key[=value][:Effect]`, where a value means
// operator Equal and none means Exists; `*` tolerates every taint.
func ParseTolerations(s string) ([]Toleration, error) {
	var out []Toleration
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var t Toleration
		item, t.Effect, _ = strings.Cut(item, ":")
		var hasValue bool
		t.Key, t.Value, hasValue = strings.Cut(item, "=")
		switch {
		case t.Key == "*" && !hasValue:
			t.Key, t.Operator = "", string(corev1.TolerationOpExists)
		case hasValue:
			t.Operator = string(corev1.TolerationOpEqual)
		default:
			t.Operator = string(corev1.TolerationOpExists)
		}
		if err := t.validate(); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// FormatTolerations is the inverse of ParseTolerations.
func FormatTolerations(ts []Toleration) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		s := t.Key
		switch {
		case t.Key == "" && t.Operator == string(corev1.TolerationOpExists):
			s = "*"
		case t.Operator != string(corev1.TolerationOpExists):
			s += "=" + t.Value
		}
		if t.Effect != "" {
			s += ":" + t.Effect
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

// Prewarmable says why this configuration cannot hand out pre-started
// Pods, or nil: a claim moves the Pod's user data to its thread on the
// user-data volume, which the gateway must mount (SharedDataDir).
func (c Config) Prewarmable() error {
	if c.SharedDataDir || (c.UserDataPVC == "" && c.UserDataHostPath == "") {
		return nil
	}
	return errors.New("a pre-started Pod's user data moves to its thread on the user-data volume, " +
		"which the gateway must see: set kubernetes_shared_data_dir (data_dir is that volume's root)")
}
