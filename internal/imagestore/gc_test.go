package imagestore

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// importOf imports an image of one layer holding a file with body and
// returns its rootfs.
func importOf(t *testing.T, s *Store, body string) string {
	t.Helper()
	img, err := s.ImportArchive(context.Background(), archiveOf(t, layerTar(t, file("id", body))))
	if err != nil {
		t.Fatal(err)
	}
	return img.RootFS
}

// age moves p's modification time back by d, as if nothing had used it.
func age(t *testing.T, p string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Collect removes an unreferenced rootfs unused past the grace and an
// abandoned import's temporaries; it keeps what keep names (the configured
// images, a live sandbox's), an unreferenced rootfs used within the grace
// (another replica's fresh import), and an import in progress. What it
// reports are store names, never host paths.
func TestCollect(t *testing.T) {
	t.Parallel()
	s := newStore(t, Config{})
	const grace = time.Hour
	configured := importOf(t, s, "configured")
	live := importOf(t, s, "live sandbox")
	stale := importOf(t, s, "stale")
	fresh := importOf(t, s, "fresh")
	for _, p := range []string{configured, live, stale} {
		age(t, p, 2*grace)
	}
	// An import in progress (recent) and one a crash left (old).
	busy := filepath.Join(s.rootfs, ".tmp-"+filepath.Base(stale)+"-busy")
	crashed := filepath.Join(s.rootfs, ".tmp-"+filepath.Base(stale)+"-crashed")
	oldArchive := filepath.Join(s.tmp, "archive-1.tar")
	newLayout := filepath.Join(s.tmp, "oci-2")
	for _, d := range []string{busy, crashed, newLayout} {
		if err := os.MkdirAll(filepath.Join(d, "usr"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(oldArchive, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	age(t, crashed, 2*grace)
	age(t, oldArchive, 2*grace)

	// The live sandbox's root as another replica spells it: through a
	// symlink to the store's directory.
	alias := filepath.Join(t.TempDir(), "images")
	if err := os.Symlink(s.cfg.Dir, alias); err != nil {
		t.Fatal(err)
	}
	liveAlias := filepath.Join(alias, strings.TrimPrefix(live, s.cfg.Dir))
	got, err := s.Collect(context.Background(), []string{configured, liveAlias, filepath.Join(s.rootfs, "gone")}, grace)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got.Removed)
	want := []string{filepath.Base(crashed), filepath.Base(stale), "tmp/archive-1.tar"}
	slices.Sort(want)
	if !slices.Equal(got.Removed, want) || got.Kept != 3 || len(got.Foreign) != 0 {
		t.Fatalf("collected %+v, want removed %v and 3 kept", got, want)
	}
	for _, n := range got.Removed {
		if strings.Contains(n, s.cfg.Dir) || filepath.IsAbs(n) {
			t.Errorf("reported %q: a host path", n)
		}
	}
	for p, want := range map[string]bool{configured: true, live: true, fresh: true, busy: true, newLayout: true,
		stale: false, crashed: false, oldArchive: false} {
		if exists(p) != want {
			t.Errorf("%s exists %v, want %v", strings.TrimPrefix(p, s.cfg.Dir), !want, want)
		}
	}
	// Kept ones are marked used: the next Collect without them waits a grace.
	if fi, err := os.Stat(configured); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Fatalf("a kept rootfs was not marked used: %v %v", fi, err)
	}
	if got, err := s.Collect(context.Background(), nil, grace); err != nil || len(got.Removed) != 0 {
		t.Fatalf("collected %v (%v) within the grace of their last use", got.Removed, err)
	}
	// A re-import of a stored rootfs marks it used as well.
	age(t, fresh, 2*grace)
	importOf(t, s, "fresh")
	if got, err := s.Collect(context.Background(), nil, grace); err != nil || slices.Contains(got.Removed, filepath.Base(fresh)) {
		t.Fatalf("collected %v (%v): a rootfs imported again just now", got.Removed, err)
	}
}

// Attack: symlinks planted in the store (as a rootfs name, as a temporary
// entry, inside a collected rootfs, named in keep) pointing outside it.
// Collect deletes nothing outside the store, does not change what they
// name (not even its times), leaves the planted entries as they are and
// reports them; the rootfs holding one is still collected.
func TestCollectFollowsNoSymlink(t *testing.T) {
	t.Parallel()
	s := newStore(t, Config{})
	outside := sentinel(t)
	// Not the mode Collect gives directories it deletes.
	if err := os.Chmod(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	victim := importOf(t, s, "victim")
	// A symlink inside a read-only rootfs, as a hostile image may hold.
	if err := os.Chmod(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(victim, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o555); err != nil {
		t.Fatal(err)
	}
	age(t, victim, 2*time.Hour)
	plantedRoot := filepath.Join(s.rootfs, strings.Repeat("ab", 32))
	planted := []string{plantedRoot, filepath.Join(s.rootfs, ".tmp-evil"), filepath.Join(s.tmp, "oci-evil"),
		filepath.Join(s.tmp, "archive-evil.tar")}
	for _, p := range planted {
		if err := os.Symlink(outside, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Collect(context.Background(), []string{plantedRoot}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Removed, []string{filepath.Base(victim)}) || exists(victim) {
		t.Fatalf("removed %v, want only the victim rootfs", got.Removed)
	}
	for _, p := range planted {
		if !exists(p) {
			t.Errorf("planted %s removed: Collect only removes what the store makes", filepath.Base(p))
		}
	}
	if len(got.Foreign) != 2 {
		t.Errorf("foreign %v, want the two planted in rootfs", got.Foreign)
	}
	after, err := os.Stat(outside)
	if err != nil || !after.ModTime().Equal(before.ModTime()) || after.Mode() != before.Mode() {
		t.Fatalf("the outside directory changed: %v -> %v (%v)", before, after, err)
	}
}
