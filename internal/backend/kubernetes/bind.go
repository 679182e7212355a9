package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// Claiming a pre-started Pod (backend.Binder). A Pod's name is fixed, its
// labels and annotations are not. A pre-started Pod is made under its own
// sandbox id (the runtime id: it names the Pod, its Service, its
// NetworkPolicy and its Secret, and their selectors match it), with its
// user data in the volume's backend.PrewarmDir. Bind patches it, in one
// request conditional on the resourceVersion it checked, to
//
//	labels       sandgate.claimed-as: {sandbox id}, the thread's identity labels, no sandgate.prewarm
//	annotations  the thread's user, thread and labels
//
// after the pool moved its user data to the thread's directory on the
// shared volume (kubernetes_shared_data_dir: the subPath bind follows the
// directory). From then on the Pod answers to the claimed id: Discover,
// List, Alive, Destroy and Logs find it by the label (sandboxOf), and its
// egress proxy credential, made for the runtime id, speaks for the thread.
// Of two claims of one Pod the API server lets one through (409 for the
// other); two claims into one id are ruled out by the pool's lock on it.

// LabelClaimedAs is the sandbox id a pre-started Pod was claimed as.
const LabelClaimedAs = "sandgate.claimed-as"

// claimAttempts bounds the check-and-patch rounds of one claim: each
// round lost to a status update of the kubelet's is retried after a
// jittered pause of up to claimBackoff, so that two claimers and the
// kubelet do not keep colliding (a loaded CI run lost 5 rounds in a row
// to a Pod written every 20 ms).
const (
	claimAttempts = 10
	claimBackoff  = 30 * time.Millisecond
)

var _ backend.Binder = (*Kubernetes)(nil)

// sandboxOf is the sandbox id a Pod answers to.
func sandboxOf(pod *corev1.Pod) string {
	if sid := pod.Labels[LabelClaimedAs]; sid != "" {
		return sid
	}
	return pod.Labels[backend.LabelSandboxID]
}

// ours: the Pod is one of this deployment's sandboxes, named after its
// runtime id with this prefix.
func (k *Kubernetes) ours(pod *corev1.Pod) bool {
	rid := pod.Labels[backend.LabelSandboxID]
	return pod.Labels[backend.LabelManagedBy] == backend.ManagedByValue && identity.ValidSandboxID(rid) &&
		pod.Name == k.name(rid) && identity.ValidSandboxID(sandboxOf(pod))
}

// podOf returns, from the API server, the Pod of sandbox sid's
// incarnation ("" = the one that has not ended, else one ending, which
// Create waits out), or nil. It looks for the Pod named after sid (made by
// Create; under that incarnation also when claimed as another id) and for
// those claimed as sid.
func (k *Kubernetes) podOf(ctx context.Context, sid, incarnation string) (*corev1.Pod, error) {
	var ending *corev1.Pod
	// pick is whether p settles the search.
	pick := func(p *corev1.Pod) bool {
		switch {
		case incarnation != "":
			return string(p.UID) == incarnation
		case live(p):
			return true
		}
		ending = p
		return false
	}
	pod, err := k.api.getPod(ctx, k.name(sid))
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, apiErr("get pod", err)
	case k.ours(pod) && (sandboxOf(pod) == sid || incarnation != "" && string(pod.UID) == incarnation) && pick(pod):
		return pod, nil // the common case: made by Create, no list needed
	}
	var list corev1.PodList
	opts := metav1.ListOptions{LabelSelector: selector() + "," + LabelClaimedAs + "=" + sid}
	if err := k.api.list(ctx, "pods", opts, &list); err != nil {
		return nil, apiErr("list pods", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; k.ours(p) && pick(p) {
			return p, nil
		}
	}
	return ending, nil
}

// Bind claims the pre-started Pod warm for spec (see above).
func (k *Kubernetes) Bind(ctx context.Context, warm backend.Info, spec backend.Spec) (backend.Info, error) {
	sid, pw := spec.SandboxID, warm.SandboxID
	if !identity.ValidSandboxID(sid) || !identity.ValidSandboxID(pw) {
		return backend.Info{}, fmt.Errorf("claim sandbox: invalid sandbox ids %q, %q", pw, sid)
	}
	if err := k.cfg.Prewarmable(); err != nil {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: %w", pw, err)
	}
	var claimed corev1.Pod
	for attempt := 0; ; attempt++ {
		pod, err := k.api.getPod(ctx, k.name(pw))
		if err != nil {
			return backend.Info{}, apiErr("claim sandbox "+pw+": get pod", err)
		}
		if !k.ours(pod) || string(pod.UID) != warm.Incarnation || pod.Labels[LabelClaimedAs] != "" || pod.Labels[backend.LabelPrewarm] == "" {
			return backend.Info{}, fmt.Errorf("claim sandbox %s: pod %s is not that unclaimed pre-started sandbox", pw, pod.Name)
		}
		if !k.reachable(pod) {
			return backend.Info{}, fmt.Errorf("claim sandbox %s: pod %s is not running (%s)", pw, pod.Name, why(pod))
		}
		patch, err := k.claimPatch(pod, spec)
		if err != nil {
			return backend.Info{}, fmt.Errorf("claim sandbox %s: %w", pw, err)
		}
		err = k.api.patch(ctx, "pods", pod.Name, types.MergePatchType, patch, &claimed)
		if err == nil {
			break
		}
		// The kubelet writes the Pod's status whenever a probe or container
		// changes, which moves its resourceVersion too: check it again.
		if !apierrors.IsConflict(err) || attempt == claimAttempts-1 {
			return backend.Info{}, apiErr("claim sandbox "+pw, err)
		}
		select {
		case <-ctx.Done():
			return backend.Info{}, apiErr("claim sandbox "+pw, ctx.Err())
		case <-time.After(rand.N(claimBackoff)):
		}
	}
	info := k.infoOf(&claimed, warm.URL)
	info.Secret = warm.Secret
	k.log.Info("prewarmed sandbox claimed", "sandbox_id", sid, "thread", spec.Thread, "prewarm_id", pw, "pod", claimed.Name)
	return info, nil
}

// claimPatch is the merge patch claiming pod for spec: the identity labels
// spec's Pod would have (the runtime id and egress mode kept, every other
// label of the pre-started Pod dropped), its annotations, and the
// resourceVersion it was checked at, which makes the patch conditional.
func (k *Kubernetes) claimPatch(pod *corev1.Pod, spec backend.Spec) ([]byte, error) {
	want := podLabels(spec, k.cfg.Instance)
	delete(want, backend.LabelPrewarm)
	want[backend.LabelSandboxID] = pod.Labels[backend.LabelSandboxID]
	want[LabelEgress] = pod.Labels[LabelEgress]
	want[LabelClaimedAs] = spec.SandboxID
	labels := map[string]*string{}
	for name := range pod.Labels {
		labels[name] = nil // a JSON null: removed
	}
	for name, v := range want {
		labels[name] = &v
	}
	identityLabels := backend.IdentityLabels(spec, k.cfg.Instance, spec.Labels)
	delete(identityLabels, backend.LabelPrewarm)
	annotation, err := json.Marshal(identityLabels)
	if err != nil {
		return nil, fmt.Errorf("encode labels: %w", err)
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"labels":          labels,
		"annotations": map[string]string{
			AnnotationUser: spec.User, AnnotationThread: spec.Thread, AnnotationLabels: string(annotation),
		},
	}})
}
