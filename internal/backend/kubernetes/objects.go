package kubernetes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// Annotations on every sandbox Pod. User and thread ids may hold ':' and run
// to 128 characters, which label values cannot, so the identity the
// reconciler adopts from travels in annotations; the full label set too.
const (
	AnnotationUser   = "sandgate.user"
	AnnotationThread = "sandgate.thread"
	AnnotationLabels = "sandgate.labels"
)

const (
	containerName = "sandbox"
	portName      = "http"
	readyPath     = "/v1/sandbox"
	// terminationGrace: the sandbox server stops at once on SIGTERM; the
	// rest is for the user's processes, which are killed with it anyway.
	terminationGrace = 10

	volUserData = "user-data"
	volSkills   = "skills"
	volTmp      = "tmp"
)

// name is the Pod's and the Service's name for a sandbox id.
func (k *Kubernetes) name(sid string) string { return k.cfg.PodPrefix + "-" + sid }

// selector is what List and the informer watch: every sandbox Sandgate made
// in the namespace (the name prefix then tells this deployment's own).
func selector() string { return backend.LabelManagedBy + "=" + backend.ManagedByValue }

// podLabels keeps the labels Kubernetes accepts; identity labels that it
// would reject (user and thread ids) live in the annotations.
func podLabels(spec backend.Spec, instance string) map[string]string {
	all := backend.IdentityLabels(spec, instance, spec.Labels)
	out := make(map[string]string, len(all))
	for k, v := range all {
		if len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
			out[k] = v
		}
	}
	return out
}

func (k *Kubernetes) podFor(spec backend.Spec) (*corev1.Pod, error) {
	labels, err := json.Marshal(backend.IdentityLabels(spec, k.cfg.Instance, spec.Labels))
	if err != nil {
		return nil, fmt.Errorf("encode labels: %w", err)
	}
	volumes, mounts, err := k.volumes(spec)
	if err != nil {
		return nil, err
	}
	if err := spec.Egress.Validate(); err != nil {
		return nil, err
	}
	proxyEnv, err := k.egressEnv(spec)
	if err != nil {
		return nil, err
	}
	allow, err := json.Marshal(spec.Egress.Allow)
	if err != nil {
		return nil, fmt.Errorf("encode egress allow-list: %w", err)
	}
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, proxyEnv) // the policy lets nothing else out anyway
	podLabelSet := podLabels(spec, k.cfg.Instance)
	podLabelSet[LabelEgress] = string(spec.Egress.EffectiveMode())
	memRequest, memLimit := k.memory(spec.Template)
	c := corev1.Container{
		Name:            containerName,
		Image:           cmp.Or(spec.Template.Image, k.cfg.Image),
		ImagePullPolicy: corev1.PullPolicy(k.cfg.ImagePullPolicy),
		Ports:           []corev1.ContainerPort{{Name: portName, ContainerPort: int32(k.cfg.Port), Protocol: corev1.ProtocolTCP}},
		Env:             envVars(env),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(k.cfg.CPURequest),
				corev1.ResourceMemory: memRequest,
			},
			Limits: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(k.cfg.CPULimit),
				corev1.ResourceMemory: memLimit,
			},
		},
		// Readiness only, no liveness probe: a sandbox busy with a heavy
		// command may answer slowly, and a restart would kill that command.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: readyPath, Port: intstr.FromString(portName),
			}},
			PeriodSeconds:    1, // readiness gates the first request: poll it closely
			TimeoutSeconds:   2,
			FailureThreshold: 3,
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: new(false),
			Privileged:               new(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   k.name(spec.SandboxID),
			Labels: podLabelSet,
			Annotations: map[string]string{
				AnnotationUser:        spec.User,
				AnnotationThread:      spec.Thread,
				AnnotationLabels:      string(labels),
				AnnotationEgressAllow: string(allow),
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{c},
			// Never: one Pod is one incarnation. A restarted container would
			// have lost its shell sessions under the same Pod UID, unnoticed.
			RestartPolicy: corev1.RestartPolicyNever,
			// The sandbox runs untrusted code: no API credentials, no
			// service environment variables leaking the namespace's layout.
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			TerminationGracePeriodSeconds: new(int64(terminationGrace)),
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes:      volumes,
			NodeSelector: k.cfg.NodeSelector,
			Tolerations:  tolerations(k.cfg.Tolerations),
		},
	}
	k.securePod(pod)
	if k.cfg.Server != "" {
		k.serve(pod)
	}
	if k.cfg.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = new(k.cfg.RuntimeClass)
	}
	if d := k.cfg.ActiveDeadline; d > 0 {
		pod.Spec.ActiveDeadlineSeconds = new(int64((d + time.Second - 1) / time.Second))
	}
	for _, s := range k.cfg.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return pod, nil
}

// memory is the container's memory request and limit: t's memory in place
// of the configured limit, the request no more than the limit (Kubernetes
// refuses a request above it).
func (k *Kubernetes) memory(t backend.Template) (request, limit resource.Quantity) {
	request, limit = resource.MustParse(k.cfg.MemoryRequest), resource.MustParse(k.cfg.MemoryLimit)
	if t.Memory > 0 {
		limit = *resource.NewQuantity(t.Memory, resource.BinarySI)
		if request.Cmp(limit) > 0 {
			request = limit.DeepCopy()
		}
	}
	return request, limit
}

// securePod applies the configured users and read-only image.
func (k *Kubernetes) securePod(pod *corev1.Pod) {
	psc, csc := pod.Spec.SecurityContext, pod.Spec.Containers[0].SecurityContext
	if k.cfg.RunAsNonRoot {
		psc.RunAsNonRoot = new(true)
	}
	if k.cfg.RunAsUser > 0 {
		psc.RunAsUser = new(int64(k.cfg.RunAsUser))
	}
	if k.cfg.RunAsGroup > 0 {
		psc.RunAsGroup = new(int64(k.cfg.RunAsGroup))
	}
	if k.cfg.FSGroup > 0 {
		psc.FSGroup = new(int64(k.cfg.FSGroup))
	}
	if k.cfg.ReadOnlyRootFS {
		csc.ReadOnlyRootFilesystem = new(true)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volTmp, MountPath: "/tmp"})
	}
}

// serve runs Sandgate's server (Config.Server) in the Pod with a secret of
// its own (secret.go). Its readiness probe is a TCP connect: every HTTP
// path of the server wants the secret, which the kubelet must not hold.
func (k *Kubernetes) serve(pod *corev1.Pod) {
	c := &pod.Spec.Containers[0]
	c.Command, c.Args = []string{k.cfg.Server}, k.serverArgs()
	c.ReadinessProbe.ProbeHandler = corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(portName)}}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volSecretRun, MountPath: secretRunDir})
	pod.Spec.Volumes = append(pod.Spec.Volumes, secretVolumes(newSecretName(pod.Name))...)
	pod.Spec.InitContainers = []corev1.Container{secretInit(c)}
}

// serviceFor is the sandbox's Service, owned by its Pod: deleting the Pod
// deletes the Service (Kubernetes' garbage collector), and a Service left
// by an older Pod of the same name is recognisably stale.
func (k *Kubernetes) serviceFor(pod *corev1.Pod) *corev1.Service {
	typ := corev1.ServiceTypeClusterIP
	if k.cfg.URLMode == URLNodePort {
		typ = corev1.ServiceTypeNodePort
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Labels:          maps.Clone(pod.Labels),
			OwnerReferences: ownerRefs(pod),
		},
		Spec: corev1.ServiceSpec{
			Type: typ,
			Selector: map[string]string{
				backend.LabelManagedBy: backend.ManagedByValue,
				backend.LabelSandboxID: pod.Labels[backend.LabelSandboxID],
			},
			Ports: []corev1.ServicePort{{
				Name: portName, Port: int32(k.cfg.Port), TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// ownerRefs make the Pod the controller of an object made for it, which
// Kubernetes' garbage collector deletes with the Pod.
func ownerRefs(pod *corev1.Pod) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
		Controller: new(true), BlockOwnerDeletion: new(true),
	}}
}

// volumes mounts the thread's user data and the skills from the configured
// cluster volumes. The spec's other mounts (ACP workspace, configured extra
// mounts) are node directories (hostPath): their host paths must exist on
// the nodes, as with DeerFlow's provisioner.
func (k *Kubernetes) volumes(spec backend.Spec) ([]corev1.Volume, []corev1.VolumeMount, error) {
	// A pre-started sandbox has no thread yet: its user data waits in
	// PrewarmDir until a claim moves it to the thread's.
	prewarm := spec.Labels[backend.LabelPrewarm] != "" && spec.User == "" && spec.Thread == ""
	if !prewarm && (identity.ValidUser(spec.User) != nil || identity.ValidThread(spec.Thread) != nil) {
		return nil, nil, fmt.Errorf("sandbox %s: user and thread must be path-safe ids", spec.SandboxID)
	}
	userData := corev1.Volume{Name: volUserData}
	switch {
	case k.cfg.UserDataPVC != "":
		userData.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.cfg.UserDataPVC}
	case k.cfg.UserDataHostPath != "":
		userData.HostPath = &corev1.HostPathVolumeSource{Path: k.cfg.UserDataHostPath, Type: new(corev1.HostPathDirectoryOrCreate)}
	default:
		userData.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	volumes := []corev1.Volume{userData}
	var mounts []corev1.VolumeMount
	threadDir := ""
	switch {
	case userData.EmptyDir != nil:
	case prewarm:
		threadDir = backend.PrewarmDir("", spec.SandboxID) // prewarm/{sandbox id}/user-data
	default:
		threadDir = backend.ThreadDir("", spec.User, spec.Thread) // users/{user}/threads/{thread}/user-data
	}
	for _, sub := range []string{"workspace", "uploads", "outputs"} {
		mounts = append(mounts, corev1.VolumeMount{
			Name: volUserData, MountPath: path.Join(backend.VirtualUserData, sub), SubPath: path.Join(threadDir, sub),
		})
	}
	skills := k.cfg.SkillsPVC != "" || k.cfg.SkillsHostPath != ""
	if skills {
		v := corev1.Volume{Name: volSkills}
		if k.cfg.SkillsPVC != "" {
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.cfg.SkillsPVC, ReadOnly: true}
		} else {
			v.HostPath = &corev1.HostPathVolumeSource{Path: k.cfg.SkillsHostPath, Type: new(corev1.HostPathDirectory)}
		}
		volumes = append(volumes, v)
		mounts = append(mounts, corev1.VolumeMount{Name: volSkills, MountPath: backend.VirtualSkills, ReadOnly: true})
	}
	for _, m := range spec.Mounts {
		if isUserData(m.ContainerPath) || (skills && m.ContainerPath == backend.VirtualSkills) {
			continue
		}
		if !path.IsAbs(m.HostPath) || !path.IsAbs(m.ContainerPath) || path.Clean(m.ContainerPath) != m.ContainerPath {
			return nil, nil, fmt.Errorf("mount %q: want absolute, clean paths", m.ContainerPath)
		}
		name := "mount-" + strconv.Itoa(len(volumes))
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: m.HostPath},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return volumes, mounts, nil
}

// isUserData: the user-data mounts, which come from the user-data volume.
func isUserData(p string) bool {
	return p == backend.VirtualUserData || strings.HasPrefix(p, backend.VirtualUserData+"/")
}

func envVars(env map[string]string) []corev1.EnvVar {
	names := slices.Sorted(maps.Keys(env))
	out := make([]corev1.EnvVar, 0, len(names))
	for _, n := range names {
		out = append(out, corev1.EnvVar{Name: n, Value: env[n]})
	}
	return out
}

func tolerations(ts []Toleration) []corev1.Toleration {
	out := make([]corev1.Toleration, 0, len(ts))
	for _, t := range ts {
		out = append(out, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect),
		})
	}
	return out
}

// url is how the gateway reaches the sandbox in the configured mode; ""
// while the address is not known yet (no Pod IP, no nodePort).
func (k *Kubernetes) url(pod *corev1.Pod, svc *corev1.Service) string {
	port := k.cfg.Port
	host := ""
	switch k.cfg.URLMode {
	case URLService:
		host = pod.Name + "." + k.ns + ".svc." + k.cfg.ClusterDomain
	case URLPodIP:
		host = pod.Status.PodIP
	case URLNodePort:
		if svc != nil {
			for _, p := range svc.Spec.Ports {
				if p.Name == portName && p.NodePort != 0 {
					host, port = k.cfg.NodeHost, int(p.NodePort)
				}
			}
		}
	}
	if host == "" {
		return ""
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// infoOf describes a Pod this backend made. An image without Sandgate's
// server has no bridge to its ports: they are dialled on the Pod's IP
// (PortHost), where its apps must listen (0.0.0.0). The Pod's own
// NetworkPolicy restricts egress only, so nothing of Sandgate's stands in
// the way; a namespace that denies ingress by default must let the
// gateways' Pods in, as it must for the sandbox API's port.
func (k *Kubernetes) infoOf(pod *corev1.Pod, url string) backend.Info {
	labels := map[string]string{}
	if err := json.Unmarshal([]byte(pod.Annotations[AnnotationLabels]), &labels); err != nil {
		labels = maps.Clone(pod.Labels) // made by hand or by an older version: take what there is
	}
	return backend.Info{
		SandboxID:   sandboxOf(pod),
		User:        pod.Annotations[AnnotationUser],
		Thread:      pod.Annotations[AnnotationThread],
		URL:         url,
		Incarnation: string(pod.UID),
		Backend:     Name,
		Labels:      labels,
		CreatedAt:   pod.CreationTimestamp.UTC(),
		PortHost:    k.portHost(pod),
	}
}

// portHost is infoOf's PortHost: "" when the Pod runs Sandgate's server.
func (k *Kubernetes) portHost(pod *corev1.Pod) string {
	if k.cfg.Server != "" {
		return ""
	}
	return pod.Status.PodIP
}

// podState classifies a Pod for Create, Alive, Discover and List.
type podState int

const (
	podStarting podState = iota // Pending, or Running but not Ready yet
	podReady
	podFinished // Failed or Succeeded, or stuck: never runs (again) (RestartPolicy Never)
	podDeleting
)

func stateOf(pod *corev1.Pod) podState {
	switch {
	case pod.DeletionTimestamp != nil:
		return podDeleting
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded || stuck(pod):
		return podFinished
	case pod.Status.Phase == corev1.PodRunning && isReady(pod):
		return podReady
	default:
		return podStarting
	}
}

// stuckReasons keep a container from ever starting without an operator:
// the kubelet leaves such a Pod Pending, retrying, where a Create would
// wait out its whole timeout. ErrImagePull is not one: the kubelet tries a
// pull again once before it backs off (ImagePullBackOff).
var stuckReasons = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "ImagePullBackOff": true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// live: the Pod has neither ended nor begun to (starting or ready).
func live(pod *corev1.Pod) bool {
	s := stateOf(pod)
	return s == podStarting || s == podReady
}

// passingSubPath is how the kubelet reports a subPath mount it could not
// prepare: intermittent (seen on the test node under concurrent first
// requests of one user's threads, and reported on other clusters), and
// retried on the kubelet's next sync, so not a reason to fail the create;
// one that lasts runs into the create timeout instead.
const passingSubPath = "failed to prepare subPath"

// stuck: a container of the Pod waits for a reason that does not pass.
func stuck(pod *corev1.Pod) bool {
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] && !strings.Contains(w.Message, passingSubPath) {
			return true
		}
	}
	return false
}

// containerRuns: the sandbox container has started and the Pod has its IP.
func containerRuns(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName {
			return cs.State.Running != nil
		}
	}
	return false
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// why tells an operator why a Pod is not ready: its phase, reason and the
// sandbox container's waiting or terminated reason.
func why(pod *corev1.Pod) string {
	parts := []string{"phase " + string(pod.Status.Phase)}
	if pod.Status.Reason != "" {
		parts = append(parts, "reason "+pod.Status.Reason)
	}
	if pod.Status.Message != "" {
		parts = append(parts, pod.Status.Message)
	}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			parts = append(parts, "container "+cs.Name+" waiting: "+w.Reason+" "+w.Message)
		}
		if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || cs.Name == containerName) {
			parts = append(parts, fmt.Sprintf("container %s exited %d: %s %s", cs.Name, t.ExitCode, t.Reason, t.Message))
		}
	}
	return strings.TrimSpace(strings.Join(parts, "; "))
}
