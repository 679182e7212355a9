package kubernetes

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

// A pre-started Pod's spec mounts its PrewarmDir, and the claim patch
// makes it spec's: conditional on the resourceVersion, the runtime id and
// egress mode kept (its Service, NetworkPolicy and egress credential
// select them), the pre-started label gone, the thread's identity in.
func TestPrewarmPodAndClaimPatch(t *testing.T) {
	t.Parallel()
	k := newForSpec(t, Config{UserDataPVC: "sandgate-data", SharedDataDir: true, Instance: "gw-1"})
	warmSpec := backend.Spec{SandboxID: "aaaaaaaaaaaaaaaa", Egress: backend.Egress{Mode: backend.EgressNone}}
	warmSpec.Labels = backend.IdentityLabels(warmSpec, "gw-1", map[string]string{backend.LabelPrewarm: "fp01", "stale": "x"})
	pod, err := k.podFor(warmSpec)
	if err != nil {
		t.Fatalf("pre-started pod: %v", err)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == volUserData && !strings.HasPrefix(m.SubPath, "prewarm/aaaaaaaaaaaaaaaa/user-data/") {
			t.Errorf("pre-started pod mounts %s at %s, want its prewarm dir", m.SubPath, m.MountPath)
		}
	}
	pod.ResourceVersion = "42"
	if _, err := k.podFor(backend.Spec{SandboxID: "bbbbbbbbbbbbbbbb", Egress: backend.Egress{Mode: backend.EgressNone}}); err == nil {
		t.Error("a spec with no thread that is not pre-started was accepted")
	}

	spec := testSpec()
	b, err := k.claimPatch(pod, spec)
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Metadata struct {
			ResourceVersion string             `json:"resourceVersion"`
			Labels          map[string]*string `json:"labels"`
			Annotations     map[string]string  `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &patch); err != nil {
		t.Fatal(err)
	}
	m := patch.Metadata
	if m.ResourceVersion != "42" {
		t.Errorf("resourceVersion = %q: the claim is not conditional", m.ResourceVersion)
	}
	want := map[string]string{
		LabelClaimedAs: spec.SandboxID, backend.LabelSandboxID: "aaaaaaaaaaaaaaaa", LabelEgress: pod.Labels[LabelEgress],
		backend.LabelUser: "alice", "team": "x",
	}
	for name, v := range want {
		if got := m.Labels[name]; got == nil || *got != v {
			t.Errorf("label %s = %v, want %s", name, got, v)
		}
	}
	for _, gone := range []string{backend.LabelPrewarm, "stale"} {
		if v, ok := m.Labels[gone]; !ok || v != nil {
			t.Errorf("label %s not removed (%v)", gone, v)
		}
	}
	var labels map[string]string
	if err := json.Unmarshal([]byte(m.Annotations[AnnotationLabels]), &labels); err != nil || labels[backend.LabelThread] != "chat:42" || labels[backend.LabelPrewarm] != "" {
		t.Errorf("labels annotation %q (%v)", m.Annotations[AnnotationLabels], err)
	}
	if m.Annotations[AnnotationUser] != "alice" || m.Annotations[AnnotationThread] != "chat:42" {
		t.Errorf("annotations %v", m.Annotations)
	}

	// After the patch the Pod answers to the thread's id, and is still ours.
	pod.Labels[LabelClaimedAs] = spec.SandboxID
	if sandboxOf(pod) != spec.SandboxID || !k.ours(pod) {
		t.Errorf("claimed pod: sandboxOf = %s, ours = %v", sandboxOf(pod), k.ours(pod))
	}
	pod.Labels[LabelClaimedAs] = "../not-an-id"
	if k.ours(pod) {
		t.Error("a pod claimed as an invalid id is taken as ours")
	}
}
