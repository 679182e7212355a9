package kubernetes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// Discover finds a reachable, answering sandbox by id. Finished
// Pods (Failed, Succeeded) and Pods still starting are not found: Create
// replaces the former and waits for the latter.
func (k *Kubernetes) Discover(ctx context.Context, sid string) (backend.Info, bool, error) {
	if !identity.ValidSandboxID(sid) {
		return backend.Info{}, false, fmt.Errorf("invalid sandbox id %q", sid)
	}
	pod, err := k.podOf(ctx, sid, "")
	if err != nil {
		return backend.Info{}, false, err
	}
	if pod == nil || !k.reachable(pod) {
		return backend.Info{}, false, nil
	}
	svc, err := k.api.getService(ctx, pod.Name)
	if apierrors.IsNotFound(err) {
		return backend.Info{}, false, nil // Create makes it
	}
	if err != nil {
		return backend.Info{}, false, apiErr("get service", err)
	}
	url := k.url(pod, svc)
	if !ownedBy(svc, pod.UID) || url == "" {
		return backend.Info{}, false, nil
	}
	secret, err := k.podSecret(ctx, pod)
	if err != nil {
		return backend.Info{}, false, err
	}
	info := k.infoOf(pod, url)
	info.Secret = secret
	rctx, cancel := context.WithTimeout(ctx, discoverReadyTimeout)
	defer cancel()
	if err := backend.WaitReadySecret(rctx, url, info.Secret); err != nil {
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("discover sandbox %s: %w", sid, ctx.Err())
		}
		k.log.Warn("sandbox pod ready but not answering", "sandbox_id", sid, "thread", pod.Annotations[AnnotationThread], "url", url, "err", err)
		return backend.Info{}, false, nil
	}
	return info, true, nil
}

// List returns the reachable sandboxes of this deployment (its name prefix),
// and removes finished Pods on the way: nothing else would, and
// DeerFlow's provisioner leaves them forever.
func (k *Kubernetes) List(ctx context.Context) ([]backend.Info, error) {
	opts := metav1.ListOptions{LabelSelector: selector()}
	var podList corev1.PodList
	if err := k.api.list(ctx, "pods", opts, &podList); err != nil {
		return nil, apiErr("list pods", err)
	}
	var svcList corev1.ServiceList
	if err := k.api.list(ctx, "services", opts, &svcList); err != nil {
		return nil, apiErr("list services", err)
	}
	services := make(map[string]*corev1.Service, len(svcList.Items))
	for i := range svcList.Items {
		services[svcList.Items[i].Name] = &svcList.Items[i]
	}
	var secretList corev1.SecretList
	if err := k.api.list(ctx, "secrets", opts, &secretList); err != nil {
		return nil, apiErr("list secrets", err)
	}
	secrets := make(map[string]*corev1.Secret, len(secretList.Items))
	for i := range secretList.Items {
		secrets[secretList.Items[i].Name] = &secretList.Items[i]
	}
	var out []backend.Info
	for i := range podList.Items {
		pod := &podList.Items[i]
		if !k.ours(pod) {
			continue // another deployment's prefix, or not ours
		}
		sid := sandboxOf(pod)
		switch {
		case stateOf(pod) == podFinished:
			k.log.Info("removing finished sandbox pod", "sandbox_id", sid, "thread", pod.Annotations[AnnotationThread],
				"pod", pod.Name, "status", why(pod))
			if err := k.remove(ctx, pod.Name, pod.UID); err != nil {
				k.log.Warn("remove finished sandbox pod", "sandbox_id", sid, "err", err)
			}
		case k.reachable(pod):
			svc := services[pod.Name]
			if svc == nil || !ownedBy(svc, pod.UID) {
				continue
			}
			url := k.url(pod, svc)
			if url == "" {
				continue
			}
			info := k.infoOf(pod, url)
			if name := secretName(pod); name != "" {
				sec := secrets[name]
				if sec == nil {
					continue // not reachable without it
				}
				secret, err := secretOf(sec, pod)
				if err != nil {
					continue
				}
				info.Secret = secret
			}
			out = append(out, info)
		}
	}
	return out, nil
}
