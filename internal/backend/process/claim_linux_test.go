package process

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
)

// TestClaimCreatesNoFile: a claim, on a new thread's first request, makes
// no new inode in the state dir (creating one costs hundreds of
// microseconds on ext4): its lock is a second name of the pre-started
// sandbox's and its state goes through the spare its create left. The
// claimed state is whole, and a destroy leaves no spare behind.
func TestClaimCreatesNoFile(t *testing.T) {
	t.Parallel()
	dataDir, stateDir := t.TempDir(), t.TempDir()
	p := newProcess(t, stateDir)
	mc := backend.MountConfig{DataDir: dataDir}
	inodes := func() map[uint64]string {
		t.Helper()
		out := map[uint64]string{}
		ents, err := os.ReadDir(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			fi, err := os.Lstat(filepath.Join(stateDir, e.Name()))
			if err == nil {
				out[fi.Sys().(*syscall.Stat_t).Ino] = e.Name()
			}
		}
		return out
	}
	const pw, other = "0123456789abcdef", "1123456789abcdef"
	start := func(id string) backend.Info {
		mounts, err := backend.PrewarmMounts(mc, id)
		if err != nil {
			t.Fatal(err)
		}
		return backendtest.MustCreate(t, p, backend.Spec{SandboxID: id, Mounts: mounts, Labels: map[string]string{backend.LabelPrewarm: "fp"}})
	}
	warm := start(pw)
	if _, err := os.Stat(p.claimPath(pw)); err != nil {
		t.Fatalf("a pre-started sandbox's create left no spare: %v", err)
	}
	spec := backendtest.Spec(t, mc, "cu", "claimer")
	if err := backend.AdoptPrewarmDirs(dataDir, pw, "cu", "claimer"); err != nil {
		t.Fatal(err)
	}
	before := inodes()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	info, err := p.Bind(ctx, warm, spec)
	if err != nil {
		t.Fatal(err)
	}
	for ino, name := range inodes() {
		if _, ok := before[ino]; !ok {
			t.Errorf("the claim created %s", name)
		}
	}
	st, err := p.readState(spec.SandboxID)
	if err != nil || st == nil || st.User != "cu" || st.Thread != "claimer" || st.Incarnation != warm.Incarnation {
		t.Fatalf("claimed state %+v, %v", st, err)
	}
	if _, err := os.Stat(p.claimPath(pw)); !os.IsNotExist(err) {
		t.Errorf("spare left after the claim: %v", err)
	}
	if res := backendtest.Exec(t, info, `echo ok`); res.ExitCode != 0 {
		t.Fatalf("claimed sandbox: %q", res.Output)
	}

	// A pre-started sandbox destroyed unclaimed takes its spare with it.
	unclaimed := start(other)
	if err := p.Destroy(ctx, unclaimed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.claimPath(other)); !os.IsNotExist(err) {
		t.Errorf("spare left after a destroy: %v", err)
	}
	if err := p.Destroy(ctx, info); err != nil {
		t.Fatal(err)
	}
}
