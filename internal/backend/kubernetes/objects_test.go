package kubernetes

import (
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
)

func newForSpec(t *testing.T, cfg Config) *Kubernetes {
	t.Helper()
	if cfg.Image == "" {
		cfg.Image = "sandbox:1"
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	return &Kubernetes{cfg: cfg, ns: "team-a", proxyURL: cfg.egressProxyURL("team-a")}
}

// testSpec has a thread id Kubernetes cannot take as a label value, and
// no egress (netpol_test.go tests the modes).
func testSpec() backend.Spec {
	spec := backend.Spec{
		SandboxID: "0123456789abcdef", User: "alice", Thread: "chat:42", Egress: backend.Egress{Mode: backend.EgressNone},
		Env: map[string]string{"B_VAR": "2", "A_VAR": "1"},
		Mounts: []backend.Mount{
			{HostPath: "/gw/data/users/alice/threads/chat:42/user-data/workspace", ContainerPath: backend.VirtualWorkspace},
			{HostPath: "/gw/skills", ContainerPath: backend.VirtualSkills, ReadOnly: true},
			{HostPath: "/srv/datasets", ContainerPath: "/mnt/datasets", ReadOnly: true},
		},
	}
	spec.Labels = backend.IdentityLabels(spec, "gw-1", map[string]string{"team": "x", "bad label": "y"})
	return spec
}

func TestPodSpec(t *testing.T) {
	t.Parallel()
	k := newForSpec(t, Config{
		PodPrefix: "sg", Port: 9000, RuntimeClass: "gvisor", NodeSelector: map[string]string{"pool": "sbx"},
		Tolerations:     []Toleration{{Key: "sandbox", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}},
		ImagePullPolicy: "IfNotPresent", ImagePullSecrets: []string{"regcred"}, ActiveDeadline: 3599500 * time.Millisecond,
		RunAsNonRoot: true,
		UserDataPVC:  "sandgate-data", SkillsPVC: "skills", Instance: "gw-1",
	})
	pod, err := k.podFor(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "sg-0123456789abcdef" {
		t.Errorf("name = %s", pod.Name)
	}
	wantLabels := map[string]string{
		backend.LabelManagedBy: "sandgate", backend.LabelSandboxID: "0123456789abcdef",
		backend.LabelUser: "alice", backend.LabelInstance: "gw-1", "team": "x", LabelEgress: "none",
	}
	if !maps.Equal(pod.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v (the thread id and the bad key kept out)", pod.Labels, wantLabels)
	}
	if pod.Annotations[AnnotationUser] != "alice" || pod.Annotations[AnnotationThread] != "chat:42" {
		t.Errorf("identity annotations = %v", pod.Annotations)
	}
	pod.Status.PodIP = "10.1.2.3"
	info := k.infoOf(pod, "http://x")
	if info.Labels[backend.LabelThread] != "chat:42" || info.Labels["bad label"] != "y" || info.User != "alice" || info.Thread != "chat:42" {
		t.Errorf("info from pod = %+v: the full label set must survive in the annotation", info)
	}
	// An image without Sandgate's server: its ports on the Pod's IP; with
	// the server, through its bridge.
	if info.PortHost != "10.1.2.3" {
		t.Errorf("port host without kubernetes_server = %q, want the Pod IP", info.PortHost)
	}
	k.cfg.Server = "/sandgate-sandbox"
	if got := k.infoOf(pod, "http://x").PortHost; got != "" {
		t.Errorf("port host with kubernetes_server = %q, want none", got)
	}
	k.cfg.Server = ""

	s := pod.Spec
	if s.RestartPolicy != corev1.RestartPolicyNever || *s.AutomountServiceAccountToken || *s.EnableServiceLinks {
		t.Errorf("restart %s, automount token %v, service links %v", s.RestartPolicy, *s.AutomountServiceAccountToken, *s.EnableServiceLinks)
	}
	if s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || !*s.SecurityContext.RunAsNonRoot {
		t.Errorf("pod security context = %+v", s.SecurityContext)
	}
	if *s.RuntimeClassName != "gvisor" || *s.ActiveDeadlineSeconds != 3600 || s.NodeSelector["pool"] != "sbx" ||
		len(s.Tolerations) != 1 || s.Tolerations[0].Effect != corev1.TaintEffectNoSchedule || s.Tolerations[0].Value != "yes" ||
		len(s.ImagePullSecrets) != 1 || s.ImagePullSecrets[0].Name != "regcred" || *s.TerminationGracePeriodSeconds != 10 {
		t.Errorf("scheduling fields = %+v", s)
	}
	if len(s.Containers) != 1 {
		t.Fatalf("%d containers", len(s.Containers))
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	if *sc.AllowPrivilegeEscalation || *sc.Privileged || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context = %+v", sc)
	}
	if c.Image != "sandbox:1" || c.ImagePullPolicy != corev1.PullIfNotPresent || c.Command != nil || c.Args != nil {
		t.Errorf("image = %s %s, command %v %v (want the image's entrypoint)", c.Image, c.ImagePullPolicy, c.Command, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9000 || c.Ports[0].Name != "http" {
		t.Errorf("ports = %+v", c.Ports)
	}
	p := c.ReadinessProbe
	if p == nil || p.HTTPGet.Path != "/v1/sandbox" || p.HTTPGet.Port.StrVal != "http" || p.PeriodSeconds != 1 {
		t.Errorf("readiness probe = %+v", p)
	}
	if c.LivenessProbe != nil {
		t.Error("liveness probe set: a busy sandbox would be restarted mid-command")
	}
	if len(c.Env) != 2 || c.Env[0].Name != "A_VAR" || c.Env[1].Value != "2" {
		t.Errorf("env = %+v, want sorted A_VAR, B_VAR", c.Env)
	}
	for name, want := range map[corev1.ResourceName][2]string{
		corev1.ResourceCPU: {"100m", "1"}, corev1.ResourceMemory: {"256Mi", "1Gi"},
	} {
		req, lim := c.Resources.Requests[name], c.Resources.Limits[name]
		if req.Cmp(resource.MustParse(want[0])) != 0 || lim.Cmp(resource.MustParse(want[1])) != 0 {
			t.Errorf("%s request/limit = %s/%s, want %s/%s", name, req.String(), lim.String(), want[0], want[1])
		}
	}

	// Volumes: user data on the PVC per user and thread, skills read-only,
	// the extra mount as a node directory; the spec's gateway-side host
	// paths for user data and skills are not used.
	vols := map[string]corev1.Volume{}
	for _, v := range s.Volumes {
		vols[v.Name] = v
	}
	if v := vols["user-data"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "sandgate-data" {
		t.Errorf("user-data volume = %+v", v)
	}
	if v := vols["skills"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "skills" || !v.PersistentVolumeClaim.ReadOnly {
		t.Errorf("skills volume = %+v", v)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: "user-data", MountPath: "/mnt/user-data/workspace", SubPath: "users/alice/threads/chat:42/user-data/workspace"},
		{Name: "user-data", MountPath: "/mnt/user-data/uploads", SubPath: "users/alice/threads/chat:42/user-data/uploads"},
		{Name: "user-data", MountPath: "/mnt/user-data/outputs", SubPath: "users/alice/threads/chat:42/user-data/outputs"},
		{Name: "skills", MountPath: "/mnt/skills", ReadOnly: true},
		{Name: "mount-2", MountPath: "/mnt/datasets", ReadOnly: true},
	}
	if !reflect.DeepEqual(c.VolumeMounts, wantMounts) {
		t.Errorf("mounts =\n%+v\nwant\n%+v", c.VolumeMounts, wantMounts)
	}
	if v := vols["mount-2"]; v.HostPath == nil || v.HostPath.Path != "/srv/datasets" {
		t.Errorf("extra mount volume = %+v", v)
	}
	if len(s.Volumes) != 3 {
		t.Errorf("volumes = %+v", s.Volumes)
	}
}

func TestPodSpecVolumeSources(t *testing.T) {
	t.Parallel()
	spec := testSpec()
	spec.Mounts = spec.Mounts[:2] // workspace + skills
	tests := []struct {
		name      string
		cfg       Config
		check     func(corev1.Volume) bool
		subPath   string
		skillsVol bool // skills from a configured volume, else the spec's path as a node dir
	}{
		{"host path", Config{UserDataHostPath: "/var/lib/sandgate", SkillsHostPath: "/srv/skills"}, func(v corev1.Volume) bool {
			return v.HostPath != nil && v.HostPath.Path == "/var/lib/sandgate" && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate
		}, "users/alice/threads/chat:42/user-data/workspace", true},
		{"empty dir", Config{}, func(v corev1.Volume) bool { return v.EmptyDir != nil }, "workspace", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pod, err := newForSpec(t, tt.cfg).podFor(spec)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(pod.Spec.Volumes[0]) {
				t.Errorf("user-data volume = %+v", pod.Spec.Volumes[0])
			}
			m := pod.Spec.Containers[0].VolumeMounts
			if m[0].SubPath != tt.subPath {
				t.Errorf("workspace subPath = %q, want %q", m[0].SubPath, tt.subPath)
			}
			skills := m[3]
			if skills.MountPath != backend.VirtualSkills || !skills.ReadOnly {
				t.Fatalf("skills mount = %+v", skills)
			}
			v := pod.Spec.Volumes[1]
			if tt.skillsVol && (v.Name != "skills" || v.HostPath.Path != "/srv/skills" || *v.HostPath.Type != corev1.HostPathDirectory) {
				t.Errorf("skills volume = %+v", v)
			}
			if !tt.skillsVol && (v.HostPath == nil || v.HostPath.Path != "/gw/skills") {
				t.Errorf("skills without a configured volume = %+v, want the spec's node path", v)
			}
		})
	}
}

func TestPodSpecRejectsUnsafeIdentity(t *testing.T) {
	t.Parallel()
	k := newForSpec(t, Config{UserDataPVC: "data"})
	for _, edit := range []func(*backend.Spec){
		func(s *backend.Spec) { s.User = "../root" },
		func(s *backend.Spec) { s.Thread = ".." },
		func(s *backend.Spec) { s.Thread = "a/b" },
		func(s *backend.Spec) { s.Mounts = []backend.Mount{{HostPath: "rel", ContainerPath: "/x"}} },
	} {
		spec := testSpec()
		edit(&spec)
		if _, err := k.podFor(spec); err == nil {
			t.Errorf("podFor(%+v) accepted", spec)
		}
	}
}

func TestServiceSpec(t *testing.T) {
	t.Parallel()
	for _, mode := range URLModes {
		k := newForSpec(t, Config{URLMode: mode, NodeHost: "node-1"})
		pod, err := k.podFor(testSpec())
		if err != nil {
			t.Fatal(err)
		}
		pod.UID = "pod-uid-1"
		svc := k.serviceFor(pod)
		if svc.Name != pod.Name {
			t.Errorf("service name %s", svc.Name)
		}
		if len(svc.OwnerReferences) != 1 {
			t.Fatalf("owner refs = %+v", svc.OwnerReferences)
		}
		o := svc.OwnerReferences[0]
		if o.Kind != "Pod" || o.APIVersion != "v1" || o.Name != pod.Name || o.UID != "pod-uid-1" || !*o.Controller || !*o.BlockOwnerDeletion {
			t.Errorf("owner ref = %+v", o)
		}
		wantType := corev1.ServiceTypeClusterIP
		if mode == URLNodePort {
			wantType = corev1.ServiceTypeNodePort
		}
		if svc.Spec.Type != wantType {
			t.Errorf("%s: service type %s, want %s", mode, svc.Spec.Type, wantType)
		}
		if !maps.Equal(svc.Spec.Selector, map[string]string{backend.LabelManagedBy: "sandgate", backend.LabelSandboxID: "0123456789abcdef"}) {
			t.Errorf("selector = %v", svc.Spec.Selector)
		}
		if p := svc.Spec.Ports[0]; p.Port != 8080 || p.TargetPort.StrVal != "http" {
			t.Errorf("port = %+v", p)
		}
	}
}

func TestURL(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandgate-sandbox-0123456789abcdef"}, Status: corev1.PodStatus{PodIP: "10.2.0.7"}}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080, NodePort: 31234}}}}
	tests := []struct {
		cfg  Config
		pod  *corev1.Pod
		svc  *corev1.Service
		want string
	}{
		{Config{}, pod, svc, "http://sandgate-sandbox-0123456789abcdef.team-a.svc.cluster.local:8080"},
		{Config{ClusterDomain: "k8s.internal", Port: 9000}, pod, nil, "http://sandgate-sandbox-0123456789abcdef.team-a.svc.k8s.internal:9000"},
		{Config{URLMode: URLNodePort, NodeHost: "192.168.1.5"}, pod, svc, "http://192.168.1.5:31234"},
		{Config{URLMode: URLNodePort, NodeHost: "fd00::5"}, pod, svc, "http://[fd00::5]:31234"},
		{Config{URLMode: URLNodePort, NodeHost: "node"}, pod, &corev1.Service{}, ""},
		{Config{URLMode: URLPodIP}, pod, nil, "http://10.2.0.7:8080"},
		{Config{URLMode: URLPodIP}, &corev1.Pod{}, nil, ""},
	}
	for _, tt := range tests {
		if got := newForSpec(t, tt.cfg).url(tt.pod, tt.svc); got != tt.want {
			t.Errorf("url(%s) = %q, want %q", tt.cfg.URLMode, got, tt.want)
		}
	}
}

func waiting(reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func TestStateOf(t *testing.T) {
	t.Parallel()
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	now := metav1.NewTime(time.Now())
	tests := []struct {
		pod  corev1.Pod
		want podState
	}{
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, podStarting},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, podStarting},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}}, podReady},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, podFinished},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, podFinished},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}}, podDeleting},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("ErrImageNeverPull")}}}, podFinished},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{waiting("CreateContainerConfigError")}}}, podFinished},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("ErrImagePull")}}}, podStarting},
		// The kubelet's subPath mkdir race: it tries again on its next sync.
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CreateContainerConfigError", Message: `failed to prepare subPath for volumeMount "user-data" of container "sandbox"`}}}}}}, podStarting},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("PodInitializing")}}}, podStarting},
	}
	for i, tt := range tests {
		if got := stateOf(&tt.pod); got != tt.want {
			t.Errorf("case %d: stateOf = %d, want %d", i, got, tt.want)
		}
	}
}

// In pod-ip mode a Pod whose sandbox container runs is asked directly (the
// readiness probe lags by up to its period); Service and nodePort traffic
// goes to Ready Pods only.
func TestReachable(t *testing.T) {
	t.Parallel()
	running := corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.2.0.7", ContainerStatuses: []corev1.ContainerStatus{
		{Name: containerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	noIP := *running.DeepCopy()
	noIP.Status.PodIP = ""
	ready := *running.DeepCopy()
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	tests := []struct {
		mode string
		pod  corev1.Pod
		want bool
	}{
		{URLPodIP, running, true},
		{URLPodIP, noIP, false},
		{URLPodIP, corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, false},
		{URLService, running, false},
		{URLNodePort, running, false},
		{URLService, ready, true},
	}
	for i, tt := range tests {
		if got := newForSpec(t, Config{URLMode: tt.mode, NodeHost: "10.0.0.1"}).reachable(&tt.pod); got != tt.want {
			t.Errorf("case %d (%s): reachable = %v, want %v", i, tt.mode, got, tt.want)
		}
	}
}

// A template's image and memory replace the configured ones in its Pod's
// container, the memory request capped at the template's limit; the zero
// template leaves the configuration, and the template's name labels the Pod.
func TestPodSpecTemplate(t *testing.T) {
	t.Parallel()
	k := newForSpec(t, Config{MemoryRequest: "512Mi", MemoryLimit: "2Gi"})
	for _, tc := range []struct {
		name           string
		template       backend.Template
		image          string
		request, limit string
	}{
		{"none", backend.Template{}, "sandbox:1", "512Mi", "2Gi"},
		{"image only", backend.Template{Name: "py", Image: "python-sandbox:3"}, "python-sandbox:3", "512Mi", "2Gi"},
		{"limit above the request", backend.Template{Name: "big", Memory: 4 << 30}, "sandbox:1", "512Mi", "4Gi"},
		{"limit below the request", backend.Template{Name: "small", Image: "tiny:1", Memory: 64 << 20}, "tiny:1", "64Mi", "64Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := testSpec()
			spec.Template = tc.template
			pod, err := k.podFor(spec)
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			if c.Image != tc.image {
				t.Errorf("image = %s, want %s", c.Image, tc.image)
			}
			req, lim := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
			if req.Cmp(resource.MustParse(tc.request)) != 0 || lim.Cmp(resource.MustParse(tc.limit)) != 0 {
				t.Errorf("memory request/limit = %s/%s, want %s/%s", req.String(), lim.String(), tc.request, tc.limit)
			}
			if got, ok := pod.Labels[backend.LabelTemplate]; got != tc.template.Name || ok != (tc.template.Name != "") {
				t.Errorf("label %s = %q (set %v), want %q", backend.LabelTemplate, got, ok, tc.template.Name)
			}
		})
	}
}
