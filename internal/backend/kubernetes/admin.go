package kubernetes

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// The operator API's capabilities on Kubernetes: logs from the kubelet
// (pods/log), and leftovers — finished Pods and Secrets no Pod holds.
// Freeze and stats come from Sandgate's server in the Pod (serverPods),
// as nothing in the Kubernetes API stops a Pod's processes, and
// metrics.k8s.io is an add-on a cluster may not run.

// defaultOrphanGrace spares a Secret made a moment ago for a Pod that
// Create is about to make: only an older Secret without a live Pod is a
// leftover.
const defaultOrphanGrace = 5 * time.Minute

var (
	_ backend.LogStreamer = (*Kubernetes)(nil)
	_ backend.Pruner      = (*Kubernetes)(nil)
)

// Logs streams the sandbox container's log, through the API server from
// the kubelet. The Pod must still be the incarnation's.
func (k *Kubernetes) Logs(ctx context.Context, info backend.Info, opts backend.LogOptions) (io.ReadCloser, error) {
	if !identity.ValidSandboxID(info.SandboxID) {
		return nil, fmt.Errorf("invalid sandbox id %q", info.SandboxID)
	}
	pod, err := k.podOf(ctx, info.SandboxID, info.Incarnation)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		return nil, fmt.Errorf("logs of sandbox %s: no pod of that incarnation: %w", info.SandboxID,
			apierrors.NewNotFound(corev1.Resource("pods"), k.name(info.SandboxID)))
	}
	lo := &corev1.PodLogOptions{Container: containerName, Follow: opts.Follow}
	if opts.Tail > 0 {
		lo.TailLines = new(int64(opts.Tail))
	}
	rc, err := k.api.logs(ctx, pod.Name, lo)
	if err != nil {
		return nil, apiErr("logs of pod "+pod.Name, err)
	}
	return rc, nil
}

// Leftovers are this deployment's finished Pods (List removes them too,
// but only when something lists) and the Secrets no live Pod holds (a
// Create cut short between the Secret and the Pod; the garbage collector
// takes those it knows the owner of). fleet selects by the instance label.
func (k *Kubernetes) Leftovers(ctx context.Context, fleet string) ([]backend.Leftover, error) {
	opts := metav1.ListOptions{LabelSelector: selector()}
	var pods corev1.PodList
	if err := k.api.list(ctx, "pods", opts, &pods); err != nil {
		return nil, apiErr("list pods", err)
	}
	var secrets corev1.SecretList
	if err := k.api.list(ctx, "secrets", opts, &secrets); err != nil {
		return nil, apiErr("list secrets", err)
	}
	held := map[string]bool{}
	var out []backend.Leftover
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !k.ours(pod) || !backend.InFleet(pod.Labels, fleet) {
			continue
		}
		held[secretName(pod)] = true // removing a finished Pod removes its Secret
		if stateOf(pod) == podFinished {
			out = append(out, backend.Leftover{Kind: "pod", Name: pod.Name, SandboxID: sandboxOf(pod)})
		}
	}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		sid := s.Labels[backend.LabelSandboxID]
		if !strings.HasPrefix(s.Name, k.name(sid)+"-") || !identity.ValidSandboxID(sid) || !backend.InFleet(s.Labels, fleet) ||
			held[s.Name] || time.Since(s.CreationTimestamp.Time) < k.orphanGrace {
			continue
		}
		out = append(out, backend.Leftover{Kind: "secret", Name: s.Name, SandboxID: sid})
	}
	return out, nil
}

// RemoveLeftover removes a leftover Leftovers found, checked again: a Pod
// still finished (its Service, policy and Secret with it), a Secret still
// held by no live Pod.
func (k *Kubernetes) RemoveLeftover(ctx context.Context, l backend.Leftover) error {
	switch l.Kind {
	case "pod":
		pod, err := k.api.getPod(ctx, l.Name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return apiErr("get pod", err)
		}
		if pod.Labels[backend.LabelManagedBy] != backend.ManagedByValue || stateOf(pod) != podFinished {
			return fmt.Errorf("remove leftover pod %s: it is not a finished sandbox pod", l.Name)
		}
		return k.remove(ctx, pod.Name, pod.UID)
	case "secret":
		var s corev1.Secret
		err := k.api.get(ctx, "secrets", l.Name, &s)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return apiErr("get secret", err)
		}
		if s.Labels[backend.LabelManagedBy] != backend.ManagedByValue {
			return fmt.Errorf("remove leftover secret %s: not a sandbox secret", l.Name)
		}
		if pod := k.pods.get(k.name(s.Labels[backend.LabelSandboxID])); pod != nil && secretName(pod) == s.Name && stateOf(pod) != podFinished {
			return fmt.Errorf("remove leftover secret %s: its pod runs", l.Name)
		}
		return k.deleteObject(ctx, "secrets", s.Name, s.UID)
	default:
		return fmt.Errorf("remove leftover %s %q: not a pod or secret", l.Kind, l.Name)
	}
}

var _ backend.IncarnationWatcher = (*Kubernetes)(nil)

// OnEnded calls fn when the informer sees a sandbox's Pod deleting,
// finished or gone.
func (k *Kubernetes) OnEnded(fn func(sandboxID, incarnation string)) { k.pods.onEnded(fn) }

// serverPods is the backend when its Pods run Sandgate's server
// (Config.Server), which freezes its own commands and measures its own
// container: the pool sees a Freezer and a Statter only then.
type serverPods struct {
	*Kubernetes
	backend.ServerFreezer
}

var (
	_ backend.Freezer = serverPods{}
	_ backend.Statter = serverPods{}
)

// Stats asks the sandbox's server.
func (serverPods) Stats(ctx context.Context, info backend.Info) (backend.Stats, error) {
	return backend.ServerStats(ctx, info)
}

// Backend is k as the gateway's pool should use it: with freeze and stats
// when its Pods run Sandgate's server, without (501 from the admin API,
// no warm pause) when they run another image.
func (k *Kubernetes) Backend() backend.Backend {
	if k.cfg.Server != "" {
		return serverPods{Kubernetes: k}
	}
	return k
}
