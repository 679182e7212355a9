// Package kubernetes runs each sandbox as a Pod plus a Service and a
// NetworkPolicy (its egress, netpol.go) owned by it,
// talking to the Kubernetes API itself through client-go (DeerFlow needs a
// separate Python provisioner for this). Pods and Services are named
// {prefix}-{sandbox_id}, so any gateway replica finds any sandbox by id;
// the Pod UID is the incarnation. Readiness comes from one shared informer
// on the backend's Pods, never from polling the API server per sandbox.
//
// The API verbs it needs are APIVerbs, mirrored by the Role in
// deployments/kubernetes/rbac.yaml.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// Name is the backend's name in Info.Backend and logs.
const Name = "kubernetes"

const (
	// discoverReadyTimeout bounds Discover's readiness check: the Pod is
	// Ready, so its API answers at once unless it is hung.
	discoverReadyTimeout = 2 * time.Second
	// cleanupTimeout bounds removing a Pod whose creation failed, on a
	// fresh context: the caller's may be what ended the creation.
	cleanupTimeout = 10 * time.Second
	// A gateway creates sandboxes in bursts; client-go's default 5 QPS would
	// queue them behind each other.
	clientQPS   = 50
	clientBurst = 100

	inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// Kubernetes implements backend.Backend with Pods.
type Kubernetes struct {
	cfg      Config
	ns       string
	proxyURL string // cfg.EgressProxyURL or its default in ns
	log      *slog.Logger
	api      *apiClient
	pods     *pods

	orphanGrace time.Duration // defaultOrphanGrace (tests shorten it)

	stop context.CancelFunc
	done chan struct{}
}

var _ backend.Backend = (*Kubernetes)(nil)

// New checks cfg, connects and starts the Pod informer, which runs until
// ctx ends or Close. It does not wait for the API server: calls that need
// the informer wait for its first sync, bounded by their own context.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Kubernetes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rc, ns, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newWithREST(ctx, cfg, rc, ns, log)
}

// restConfig loads the kubeconfig file, or the in-cluster service account.
func restConfig(cfg Config) (*rest.Config, string, error) {
	var rc *rest.Config
	ns := cfg.Namespace
	if cfg.Kubeconfig != "" {
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{})
		var err error
		if rc, err = cc.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("kubernetes backend: load kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, "", fmt.Errorf("kubernetes backend: kubeconfig namespace: %w", err)
			}
		}
	} else {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, "", fmt.Errorf("kubernetes backend: no kubeconfig set and not in a cluster: %w", err)
		}
		if ns == "" {
			if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
				ns = strings.TrimSpace(string(b))
			}
		}
	}
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = clientQPS, clientBurst
	}
	return rc, ns, nil
}

func newWithREST(ctx context.Context, cfg Config, rc *rest.Config, ns string, log *slog.Logger) (*Kubernetes, error) {
	cfg = cfg.withDefaults()
	api, err := newAPIClient(rc, ns)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("backend", Name)
	if cfg.UserDataPVC == "" && cfg.UserDataHostPath == "" {
		log.Warn("kubernetes backend: no user-data volume configured; thread files live in an emptyDir and are lost with each sandbox")
	}
	ictx, stop := context.WithCancel(ctx)
	k := &Kubernetes{
		cfg: cfg, ns: ns, proxyURL: cfg.egressProxyURL(ns), log: log, api: api, pods: newPods(api),
		orphanGrace: defaultOrphanGrace, stop: stop, done: make(chan struct{}),
	}
	go func() {
		defer close(k.done)
		k.pods.run(ictx)
	}()
	log.Info("kubernetes backend ready", "namespace", ns, "url_mode", cfg.URLMode, "pod_prefix", cfg.PodPrefix,
		"egress_proxy_url", k.proxyURL)
	return k, nil
}

// Ping checks that the API server answers and lets this backend list its
// Pods (the gateway's /readyz).
func (k *Kubernetes) Ping(ctx context.Context) error {
	var list corev1.PodList
	if err := k.api.list(ctx, "pods", metav1.ListOptions{LabelSelector: selector(), Limit: 1}, &list); err != nil {
		return apiErr("kubernetes API", err)
	}
	return nil
}

// Close stops the informer.
func (k *Kubernetes) Close() error {
	k.stop()
	<-k.done
	return nil
}

// Create starts the sandbox's Pod and Service, or takes over the live Pod
// already there under that name, and returns once the Pod is Ready and the
// sandbox answers at its URL. A finished Pod in the way is replaced.
func (k *Kubernetes) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if !identity.ValidSandboxID(spec.SandboxID) {
		return backend.Info{}, fmt.Errorf("invalid sandbox id %q", spec.SandboxID)
	}
	want, err := k.podFor(spec)
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	log := k.log.With("sandbox_id", spec.SandboxID, "thread", spec.Thread, "pod", want.Name)
	began := time.Now()
	pod, fresh, err := k.livePod(ctx, spec.SandboxID, want, spec.Secret, log)
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	minted := ""
	if fresh {
		minted = spec.Secret // what the Secret createPod just made holds
	}
	info, err := k.finish(ctx, pod, minted)
	if err != nil {
		// A Pod that did not come up is removed, a taken-over one too: the
		// pool's lock means no other replica is waiting for it, and nothing
		// else would ever clean it up.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		if rerr := k.remove(cctx, pod.Name, pod.UID); rerr != nil {
			log.Warn("remove sandbox pod after failed create", "err", rerr)
		}
		cancel()
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	if fresh {
		log.Info("sandbox created", "url", info.URL, "uid", pod.UID, "duration", time.Since(began))
	} else {
		log.Info("sandbox already running", "url", info.URL, "uid", pod.UID)
	}
	return info, nil
}

// livePod returns a live Pod answering to sid: the one there (made by
// Create, or a pre-started one claimed as sid), or a new one (fresh).
// Finished Pods are removed, and deleting ones waited out.
func (k *Kubernetes) livePod(ctx context.Context, sid string, want *corev1.Pod, secret string, log *slog.Logger) (*corev1.Pod, bool, error) {
	for {
		pod, err := k.podOf(ctx, sid, "")
		if err != nil {
			return nil, false, err
		}
		if pod == nil {
			return k.createPod(ctx, want, secret)
		}
		switch stateOf(pod) {
		case podFinished:
			log.Info("replacing finished sandbox pod", "uid", pod.UID, "status", why(pod))
			if err := k.remove(ctx, pod.Name, pod.UID); err != nil {
				return nil, false, err
			}
			fallthrough
		case podDeleting:
			if err := k.waitGone(ctx, pod); err != nil {
				return nil, false, err
			}
		default:
			return pod, false, nil
		}
	}
}

// createPod makes the Pod (with its Secret first, for Sandgate's server);
// a Pod another replica made first is taken (not fresh).
func (k *Kubernetes) createPod(ctx context.Context, want *corev1.Pod, secret string) (*corev1.Pod, bool, error) {
	sname := secretName(want)
	if sname != "" {
		if secret == "" {
			return nil, false, errors.New("kubernetes_server is set but the sandbox has no secret to give it")
		}
		var got corev1.Secret
		if err := k.api.create(ctx, "secrets", secretFor(sname, want.Labels, secret), &got); err != nil {
			return nil, false, apiErr("create secret", err)
		}
	}
	pod, err := k.api.createPod(ctx, want)
	if err != nil && sname != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		if derr := k.deleteObject(cctx, "secrets", sname, ""); derr != nil {
			k.log.Warn("remove the secret of a pod not made", "sandbox_id", want.Labels[backend.LabelSandboxID], "err", derr)
		}
		cancel()
	}
	if apierrors.IsAlreadyExists(err) {
		pod, err = k.api.getPod(ctx, want.Name) // another replica was quicker: take its Pod
		if err != nil {
			return nil, false, apiErr("get pod", err)
		}
		if !k.ours(pod) || sandboxOf(pod) != sandboxOf(want) {
			return nil, false, fmt.Errorf("pod %s exists and is not this sandbox's", pod.Name)
		}
		return pod, false, nil
	}
	if err != nil {
		return nil, false, apiErr("create pod", err)
	}
	if sname != "" {
		// Unowned, the Secret outlives a Pod deleted by others; prune
		// takes it then (Leftovers). Not a reason to fail the sandbox.
		if err := k.ownSecret(ctx, pod); err != nil {
			k.log.Warn("make the pod its secret's owner", "sandbox_id", want.Labels[backend.LabelSandboxID], "err", err)
		}
	}
	return pod, true, nil
}

// waitGone waits until the Pod of that UID has left the informer's cache.
func (k *Kubernetes) waitGone(ctx context.Context, pod *corev1.Pod) error {
	err := k.pods.waitFor(ctx, pod.Name, func(p *corev1.Pod) (bool, error) {
		return p == nil || p.UID != pod.UID, nil
	})
	if err != nil {
		return fmt.Errorf("wait for old pod %s to go: %w", pod.Name, err)
	}
	return nil
}

// finish makes sure the Pod has its NetworkPolicy and Service, waits for
// it to be reachable and for the sandbox to answer, and describes it with
// its secret (minted: the one Create gave a Pod it made).
func (k *Kubernetes) finish(ctx context.Context, pod *corev1.Pod, minted string) (backend.Info, error) {
	// The policy first: until it is there the Pod has no egress at all.
	if _, err := k.ensureOwned(ctx, pod, "networkpolicies", k.policyFor(pod)); err != nil {
		return backend.Info{}, err
	}
	obj, err := k.ensureOwned(ctx, pod, "services", k.serviceFor(pod))
	if err != nil {
		return backend.Info{}, err
	}
	svc := obj.(*corev1.Service)
	// A Pod this call made holds minted; another's Secret is read.
	secret := minted
	if secret == "" || secretName(pod) == "" {
		if secret, err = k.podSecret(ctx, pod); err != nil {
			return backend.Info{}, err
		}
	}
	ready, err := k.waitReady(ctx, pod)
	if err != nil {
		return backend.Info{}, err
	}
	url := k.url(ready, svc)
	if url == "" {
		return backend.Info{}, fmt.Errorf("pod %s is ready but has no address for url mode %s", pod.Name, k.cfg.URLMode)
	}
	if err := backend.WaitReadySecret(ctx, url, secret); err != nil {
		return backend.Info{}, fmt.Errorf("pod %s ready, but %s does not answer: %w", pod.Name, url, err)
	}
	info := k.infoOf(ready, url)
	info.Secret = secret
	return info, nil
}

// owned is an object made for a Pod and owned by it.
type owned interface {
	runtime.Object
	metav1.Object
}

// newOwned is an empty object of resource, to read into.
func newOwned(resource string) owned {
	switch resource {
	case "networkpolicies":
		return &networkingv1.NetworkPolicy{}
	case "secrets":
		return &corev1.Secret{}
	}
	return &corev1.Service{}
}

// ensureOwned returns the Pod's object of resource (want's name), creating
// want, or replacing a stale one an earlier Pod of the same name left.
func (k *Kubernetes) ensureOwned(ctx context.Context, pod *corev1.Pod, resource string, want owned) (owned, error) {
	kind := singular(resource)
	for range 3 {
		got := newOwned(resource)
		err := k.api.get(ctx, resource, want.GetName(), got)
		switch {
		case err == nil && ownedBy(got, pod.UID):
			return got, nil
		case err == nil:
			k.log.Info("removing stale "+kind+" of an earlier pod", kind, got.GetName(), "sandbox_id", pod.Labels[backend.LabelSandboxID])
			if err := k.deleteObject(ctx, resource, got.GetName(), got.GetUID()); err != nil {
				return nil, err
			}
		case !apierrors.IsNotFound(err):
			return nil, apiErr("get "+kind, err)
		}
		got = newOwned(resource)
		err = k.api.create(ctx, resource, want, got)
		if err == nil {
			return got, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, apiErr("create "+kind, err)
		}
	}
	return nil, fmt.Errorf("%s %s keeps changing under us", kind, want.GetName())
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == "Pod" && o.UID == uid {
			return true
		}
	}
	return false
}

// waitReady waits, through the informer, for the Pod's Ready condition,
// failing at once when the Pod finishes or goes away. In pod-ip mode it
// waits only until the sandbox's container runs and the Pod has its IP:
// the caller then asks the sandbox itself, every few milliseconds, where
// the kubelet's readiness probe runs once a second (creates took 1.1 s or
// 2.0 s, by which probe caught the server). Service and nodePort traffic
// goes to Ready Pods only, so those modes wait for the condition.
func (k *Kubernetes) waitReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var ready *corev1.Pod
	seen := false
	last := why(pod)
	err := k.pods.waitFor(ctx, pod.Name, func(p *corev1.Pod) (bool, error) {
		if p == nil || p.UID != pod.UID {
			if seen {
				return false, errors.New("pod was deleted while starting")
			}
			return false, nil // the informer has not seen it yet
		}
		seen = true
		last = why(p)
		if k.reachable(p) {
			ready = p
			return true, nil
		}
		switch stateOf(p) {
		case podFinished:
			return false, fmt.Errorf("pod finished before it was ready (%s)", last)
		case podDeleting:
			return false, errors.New("pod was deleted while starting")
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s not ready: %w (last: %s)", pod.Name, err, last)
	}
	return ready, nil
}

// reachable: the Pod can be asked directly: Ready, or in pod-ip mode its
// sandbox container runs (waitReady). Create, Discover and List agree on
// it, so a sandbox one replica made is found by the next at once.
func (k *Kubernetes) reachable(pod *corev1.Pod) bool {
	switch stateOf(pod) {
	case podReady:
		return true
	case podStarting:
		return k.cfg.URLMode == URLPodIP && containerRuns(pod)
	}
	return false
}

// remove deletes the Pod of that UID, its NetworkPolicy and its Service.
func (k *Kubernetes) remove(ctx context.Context, name string, uid types.UID) error {
	owned := map[string]string{"services": name, "networkpolicies": name}
	if pod := k.pods.get(name); pod != nil && (uid == "" || pod.UID == uid) {
		owned["secrets"] = secretName(pod) // else the garbage collector's
	}
	if err := k.deleteObject(ctx, "pods", name, uid); err != nil {
		return err
	}
	for resource, oname := range owned {
		if oname == "" {
			continue
		}
		if err := k.deleteOwned(ctx, resource, oname, uid); err != nil {
			return err
		}
	}
	return nil
}

// deleteOwned deletes the object owned by the Pod uid ("" = any owner).
// Kubernetes' garbage collector would delete it with the Pod; doing it here
// too frees a nodePort at once and covers clusters where it lags.
func (k *Kubernetes) deleteOwned(ctx context.Context, resource, name string, uid types.UID) error {
	obj := newOwned(resource)
	err := k.api.get(ctx, resource, name, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return apiErr("get "+singular(resource), err)
	}
	if uid != "" && !ownedBy(obj, uid) {
		return nil // a newer Pod's
	}
	return k.deleteObject(ctx, resource, name, obj.GetUID())
}

// deleteObject deletes resource/name if its UID is still uid ("" = any).
// Gone already, or replaced by another object, is success.
func (k *Kubernetes) deleteObject(ctx context.Context, resource, name string, uid types.UID) error {
	var opts metav1.DeleteOptions
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := k.api.delete(ctx, resource, name, opts)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return apiErr("delete "+singular(resource), err)
}

// singular names one object of resource, for errors and logs.
func singular(resource string) string {
	if r, ok := strings.CutSuffix(resource, "ies"); ok {
		return r + "y"
	}
	return strings.TrimSuffix(resource, "s")
}

// Destroy deletes the incarnation's Pod and Service (with no incarnation,
// whatever runs under the id). A newer incarnation is left alone; an
// unknown sandbox is nil. It does not wait for the Pod to terminate:
// Create waits out a Pod still deleting under the same name.
func (k *Kubernetes) Destroy(ctx context.Context, info backend.Info) error {
	if !identity.ValidSandboxID(info.SandboxID) {
		return fmt.Errorf("invalid sandbox id %q", info.SandboxID)
	}
	pod, err := k.podOf(ctx, info.SandboxID, info.Incarnation)
	if err != nil || pod == nil {
		return err
	}
	if err := k.remove(ctx, pod.Name, pod.UID); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", info.SandboxID, err)
	}
	k.log.Info("sandbox destroyed", "sandbox_id", info.SandboxID, "thread", info.Thread, "pod", pod.Name, "uid", pod.UID)
	return nil
}

// Alive reports whether the incarnation's Pod exists and has not finished,
// from the informer's cache. Only a miss is confirmed with the API server,
// so a Pod made a moment ago by another replica is never declared dead.
func (k *Kubernetes) Alive(ctx context.Context, info backend.Info) (bool, error) {
	if err := k.pods.synced(ctx); err != nil {
		return false, err
	}
	pod := k.pods.of(info.SandboxID, info.Incarnation)
	if pod == nil {
		var err error
		if pod, err = k.podOf(ctx, info.SandboxID, info.Incarnation); err != nil || pod == nil {
			return false, err
		}
	}
	return live(pod), nil
}

// apiErr marks failures to reach the API server as backend.ErrUnavailable
// (503 to clients); refusals (forbidden, invalid) stay plain errors.
func apiErr(op string, err error) error {
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsInvalid(err),
		apierrors.IsBadRequest(err), apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return fmt.Errorf("%s: %w", op, err)
	default:
		return fmt.Errorf("%w: %s: %w", backend.ErrUnavailable, op, err)
	}
}
