package e2e

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

// TestKubernetesCheckpointRestoreAndFork: with data_dir the root of the
// user-data volume (kubernetes_shared_data_dir), a workspace built in a Pod
// on the real node is checkpointed (the Pod frozen by its server for the
// copy), changed every way, restored byte-identical (the Pod sees it), and
// forked onto a thread whose new Pod starts with those files and diverges.
func TestKubernetesCheckpointRestoreAndFork(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	f := newFleet(t, append(c.flags(t), "--data-dir", c.userData, "--kubernetes-shared-data-dir")...)
	g1, g2 := f.start(), f.start()
	if out := shell(t, g1.URL, "kck", workspaceBuild); !strings.Contains(out.Output, "built") {
		t.Fatalf("build workspace: %+v", out)
	}
	ws := backend.ThreadDir(c.userData, "default", "kck")
	want := manifest(t, ws)
	ck := createCheckpoint(t, g1.URL, "kck", "before")
	if ck.Files < 4 || ck.Size < 200000 {
		t.Fatalf("checkpoint: %+v", ck)
	}

	shell(t, g1.URL, "kck", workspaceMutation)
	if len(diffManifests(want, manifest(t, ws))) == 0 {
		t.Fatal("the mutation changed nothing")
	}
	if code, body, _ := call(t, "POST", g2.URL+"/threads/kck/checkpoints/"+ck.ID+"/restore", nil); code != 200 {
		t.Fatalf("restore: %d %s", code, body)
	}
	checkRestored(t, g1.URL, "kck", ws, want)

	code, body, _ := call(t, "POST", g2.URL+"/threads/kck/fork", map[string]any{"thread": "kck-fork", "checkpoint": ck.ID})
	if code != 201 {
		t.Fatalf("fork: %d %s", code, body)
	}
	if d := diffManifests(want, manifest(t, backend.ThreadDir(c.userData, "default", "kck-fork"))); len(d) > 0 {
		t.Fatalf("fork differs from the checkpoint:\n%s", strings.Join(d, "\n"))
	}
	if out := shell(t, g1.URL, "kck-fork", "cat /mnt/user-data/workspace/src/main.go && echo f > /mnt/user-data/workspace/fork-only && echo ok"); !strings.Contains(out.Output, "package main") || !strings.Contains(out.Output, "ok") {
		t.Fatalf("the fork's Pod: %q", out.Output)
	}
	if out := shell(t, g1.URL, "kck", "ls /mnt/user-data/workspace"); strings.Contains(out.Output, "fork-only") {
		t.Fatalf("the fork's writes reached its origin: %q", out.Output)
	}
}
