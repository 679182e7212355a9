package kubernetes

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	base := Config{Image: "sandbox:1"}
	tests := []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"full", func(c *Config) {
			*c = Config{Image: "i", Namespace: "sbx", PodPrefix: "sg", Port: 9000, URLMode: URLNodePort,
				NodeHost: "node-1.example.com", CPURequest: "250m", CPULimit: "2", MemoryRequest: "512Mi",
				MemoryLimit: "4Gi", RuntimeClass: "gvisor", NodeSelector: map[string]string{"pool": "sandbox"},
				Tolerations: []Toleration{
					{Key: "sandbox", Operator: "Equal", Value: "true", Effect: "NoSchedule"},
					{Operator: "Exists"},
					{Key: "k", Effect: "NoExecute"},
				},
				ImagePullPolicy: "IfNotPresent", ImagePullSecrets: []string{"regcred"}, ActiveDeadline: 24 * time.Hour,
				UserDataPVC: "sandgate-data", SkillsHostPath: "/srv/skills", RunAsNonRoot: true}
		}, ""},
		{"node host ip", func(c *Config) { c.URLMode, c.NodeHost = URLNodePort, "10.1.2.3" }, ""},
		{"pod ip mode", func(c *Config) { c.URLMode = URLPodIP }, ""},
		{"no image", func(c *Config) { c.Image = "" }, "image: must be set"},
		{"prefix upper", func(c *Config) { c.PodPrefix = "Sandgate" }, "container_prefix"},
		{"prefix digit first", func(c *Config) { c.PodPrefix = "1sg" }, "container_prefix"},
		{"prefix too long", func(c *Config) { c.PodPrefix = strings.Repeat("a", 47) }, "container_prefix"},
		{"bad namespace", func(c *Config) { c.Namespace = "My_NS" }, "kubernetes_namespace"},
		{"port", func(c *Config) { c.Port = 70000 }, "port: 70000"},
		{"url mode", func(c *Config) { c.URLMode = "ingress" }, "kubernetes_url_mode"},
		{"nodeport without host", func(c *Config) { c.URLMode = URLNodePort }, "kubernetes_node_host: must be set"},
		{"bad node host", func(c *Config) { c.URLMode, c.NodeHost = URLNodePort, "http://node:80" }, "kubernetes_node_host"},
		{"cluster domain", func(c *Config) { c.ClusterDomain = "bad_domain" }, "kubernetes_cluster_domain"},
		{"cpu quantity", func(c *Config) { c.CPULimit = "lots" }, "kubernetes_cpu_limit"},
		{"memory quantity", func(c *Config) { c.MemoryRequest = "1 GB" }, "kubernetes_memory_request"},
		{"request over limit", func(c *Config) { c.MemoryRequest, c.MemoryLimit = "2Gi", "1Gi" }, "exceeds the limit"},
		{"runtime class", func(c *Config) { c.RuntimeClass = "G Visor" }, "kubernetes_runtime_class"},
		{"pull policy", func(c *Config) { c.ImagePullPolicy = "always" }, "kubernetes_image_pull_policy"},
		{"pull secret", func(c *Config) { c.ImagePullSecrets = []string{"Bad Secret"} }, "kubernetes_image_pull_secrets"},
		{"node selector", func(c *Config) { c.NodeSelector = map[string]string{"a": "b c"} }, "kubernetes_node_selector"},
		{"toleration op", func(c *Config) { c.Tolerations = []Toleration{{Key: "k", Operator: "In"}} }, "operator"},
		{"toleration exists value", func(c *Config) { c.Tolerations = []Toleration{{Key: "k", Operator: "Exists", Value: "v"}} }, "no value"},
		{"toleration empty key", func(c *Config) { c.Tolerations = []Toleration{{Value: "v"}} }, "empty key"},
		{"toleration effect", func(c *Config) { c.Tolerations = []Toleration{{Key: "k", Effect: "Never"}} }, "effect"},
		{"deadline", func(c *Config) { c.ActiveDeadline = -time.Second }, "negative"},
		{"user data both", func(c *Config) { c.UserDataPVC, c.UserDataHostPath = "p", "/data" }, "set one, not both"},
		{"skills both", func(c *Config) { c.SkillsPVC, c.SkillsHostPath = "p", "/skills" }, "kubernetes_skills_pvc and"},
		{"pvc name", func(c *Config) { c.UserDataPVC = "Data" }, "kubernetes_user_data_pvc"},
		{"host path relative", func(c *Config) { c.UserDataHostPath = "data" }, "kubernetes_user_data_host_path"},
		{"host path unclean", func(c *Config) { c.SkillsHostPath = "/srv/../etc" }, "clean absolute path"},
		{"egress proxy service", func(c *Config) { c.EgressProxyURL = "http://sandgate-egress.sandgate.svc:3128" }, ""},
		{"egress proxy ip", func(c *Config) { c.EgressProxyURL = "http://10.96.0.50:3128/" }, ""},
		{"egress proxy https", func(c *Config) { c.EgressProxyURL = "https://proxy:3128" }, "kubernetes_egress_proxy_url"},
		{"egress proxy no port", func(c *Config) { c.EgressProxyURL = "http://proxy" }, "with a port"},
		{"egress proxy credentials", func(c *Config) { c.EgressProxyURL = "http://u:p@proxy:3128" }, "kubernetes_egress_proxy_url"},
		{"egress proxy path", func(c *Config) { c.EgressProxyURL = "http://proxy:3128/x" }, "kubernetes_egress_proxy_url"},
		{"egress proxy host", func(c *Config) { c.EgressProxyURL = "http://bad_host:3128" }, "not a host name"},
		{"egress proxy port", func(c *Config) { c.EgressProxyPort = 65536 }, "kubernetes_egress_proxy_port"},
		{"gateway labels empty", func(c *Config) { c.GatewayPodLabels = map[string]string{} }, "must select the gateway"},
		{"gateway labels bad", func(c *Config) { c.GatewayPodLabels = map[string]string{"app": "a b"} }, "kubernetes_gateway_pod_labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := base
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	err := Config{Port: -1, URLMode: "x", CPULimit: "?"}.Validate()
	for _, want := range []string{"image: must be set", "port: -1", "kubernetes_url_mode", "kubernetes_cpu_limit"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.PodPrefix != "sandgate-sandbox" || c.Port != 8080 || c.URLMode != URLService || c.ClusterDomain != "cluster.local" ||
		c.CPURequest != "100m" || c.CPULimit != "1" || c.MemoryRequest != "256Mi" || c.MemoryLimit != "1Gi" {
		t.Fatalf("defaults = %+v", c)
	}
	if c.EgressProxyPort != 3128 || !maps.Equal(c.GatewayPodLabels, map[string]string{"app.kubernetes.io/name": "sandgate-gateway"}) ||
		c.egressProxyURL("team-a") != "http://sandgate-egress.team-a.svc.cluster.local:3128" {
		t.Errorf("egress defaults = %d %v %s", c.EgressProxyPort, c.GatewayPodLabels, c.egressProxyURL("team-a"))
	}
	if u := (Config{EgressProxyURL: "http://10.96.0.50:3128"}).egressProxyURL("team-a"); u != "http://10.96.0.50:3128" {
		t.Errorf("configured proxy url became %s", u)
	}
}

func TestParseTolerations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []Toleration
		err  bool
	}{
		{"", nil, false},
		{"dedicated=sandbox:NoSchedule", []Toleration{{Key: "dedicated", Operator: "Equal", Value: "sandbox", Effect: "NoSchedule"}}, false},
		{"gpu:NoExecute, spot", []Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoExecute"}, {Key: "spot", Operator: "Exists"}}, false},
		{"*", []Toleration{{Operator: "Exists"}}, false},
		{"*:NoSchedule", []Toleration{{Operator: "Exists", Effect: "NoSchedule"}}, false},
		{"k=:NoSchedule", []Toleration{{Key: "k", Operator: "Equal", Effect: "NoSchedule"}}, false},
		{"k:Sometimes", nil, true},
		{"=v", nil, true},
		{"bad key!", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseTolerations(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("ParseTolerations(%q) = %+v, %v; want %+v, err %v", tt.in, got, err, tt.want, tt.err)
			continue
		}
		if err == nil {
			back, _ := ParseTolerations(FormatTolerations(got))
			if !slices.Equal(back, got) {
				t.Errorf("round trip of %q: %q parses to %+v", tt.in, FormatTolerations(got), back)
			}
		}
	}
}
