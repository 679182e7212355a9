package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// A sandbox Pod running Sandgate's server (Config.Server) gets a secret of
// its own, which its commands never read:
//
//   - the gateway keeps it in a Secret of the Pod's own, named after the
//     Pod plus a random suffix (owned by the Pod once it exists, so the
//     garbage collector removes it with the Pod). A new name per Pod, not
//     the Pod's name: the kubelet caches an immutable Secret while any Pod
//     of its node refers to it, and a Pod replaced under the same name
//     would get its predecessor's;
//   - only the init container mounts that Secret. It copies the one file
//     into a memory emptyDir (secretRunDir) shared with the server's
//     container, whose image never sees the Secret volume;
//   - the server reads the copy and removes it before it serves anything
//     (--secret-file) and makes itself non-dumpable, so commands of the same
//     uid can neither find the file nor read its memory;
//   - the readiness probe is a TCP connect, which needs no secret;
//   - the egress proxy password is a one-way derivation (EgressPassword).
//
// The Pod spec names the Secret, never its value, so a Pod's environment,
// `kubectl describe` and /proc/1/environ hold nothing of it.
const (
	secretKey     = "secret"
	volSecret     = "sandgate-secret"
	volSecretRun  = "sandgate-run"
	secretSrcDir  = "/var/run/sandgate-secret"
	secretRunDir  = "/run/sandgate"
	initContainer = "secret"
)

// secretRunFile is where the server finds its secret's copy.
var secretRunFile = path.Join(secretRunDir, secretKey)

// secretFor is a sandbox Pod's Secret.
func secretFor(name string, labels map[string]string, secret string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(labels)},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  new(true),
		Data:       map[string][]byte{secretKey: []byte(secret)},
	}
}

// newSecretName names the Secret of a new Pod.
func newSecretName(pod string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return pod + "-" + hex.EncodeToString(b)
}

// secretName is the name of the Pod's Secret ("" = it has none).
func secretName(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == volSecret && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// secretVolumes are the Secret volume (init container only) and the memory
// emptyDir the copy travels through; 0444: nothing but the init container
// mounts the Secret, and it runs as the server's uid, whatever that is.
func secretVolumes(name string) []corev1.Volume {
	return []corev1.Volume{
		{Name: volSecret, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: name, DefaultMode: new(int32(0o444)),
			Items: []corev1.KeyToPath{{Key: secretKey, Path: secretKey}},
		}}},
		{Name: volSecretRun, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: new(resource.MustParse("1Mi")),
		}}},
	}
}

// secretInit is the init container that copies the secret for main, the
// server's container (whose image, security context and resources it
// shares). It needs cp in the image; Sandgate's images have it.
func secretInit(main *corev1.Container) corev1.Container {
	return corev1.Container{
		Name:            initContainer,
		Image:           main.Image,
		ImagePullPolicy: main.ImagePullPolicy,
		Command:         []string{"cp", path.Join(secretSrcDir, secretKey), secretRunFile},
		SecurityContext: main.SecurityContext.DeepCopy(),
		Resources:       *main.Resources.DeepCopy(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: volSecret, MountPath: secretSrcDir, ReadOnly: true},
			{Name: volSecretRun, MountPath: secretRunDir},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// serverArgs start Sandgate's server in the Pod with its secret's copy.
func (k *Kubernetes) serverArgs() []string {
	return []string{
		sandboxspec.ServerCommand,
		"--" + sandboxspec.FlagListen, fmt.Sprintf("0.0.0.0:%d", k.cfg.Port),
		"--" + sandboxspec.FlagHome, sandboxspec.VirtualWorkspace,
		"--" + sandboxspec.FlagSecretFile, secretRunFile,
	}
}

// ownSecret makes the Pod its Secret's owner, so that the garbage
// collector deletes it with the Pod whoever deletes the Pod.
func (k *Kubernetes) ownSecret(ctx context.Context, pod *corev1.Pod) error {
	patch := fmt.Appendf(nil, `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}]}}`,
		pod.Name, pod.UID)
	if err := k.api.patch(ctx, "secrets", secretName(pod), types.MergePatchType, patch, nil); err != nil {
		return apiErr("own secret", err)
	}
	return nil
}

// podSecret is the secret of the Pod: its Secret's, when the Pod runs
// Sandgate's server ("" for a third-party image).
func (k *Kubernetes) podSecret(ctx context.Context, pod *corev1.Pod) (string, error) {
	name := secretName(pod)
	if name == "" {
		return "", nil
	}
	var s corev1.Secret
	if err := k.api.get(ctx, "secrets", name, &s); err != nil {
		return "", apiErr("get secret", err)
	}
	return secretOf(&s, pod)
}

// secretOf is the secret in s, the Secret of pod: one another Pod owns is
// refused.
func secretOf(s *corev1.Secret, pod *corev1.Pod) (string, error) {
	if len(s.OwnerReferences) > 0 && !ownedBy(s, pod.UID) {
		return "", fmt.Errorf("secret %s belongs to another pod", s.Name)
	}
	return string(s.Data[secretKey]), nil
}
