package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// The cache keeps its newest entries, the one in use and any another
// process holds, and removes the rest.
func TestPruneTestBinsKeepsNewestAndHeld(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	names := []string{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7"} // e0 newest
	for _, name := range names {
		if err := os.Mkdir(filepath.Join(cache, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	held, err := lockEntry(filepath.Join(cache, "e6"), syscall.LOCK_SH)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for i, name := range names {
		at := time.Now().Add(-time.Duration(i) * time.Hour)
		if err := os.Chtimes(filepath.Join(cache, name), at, at); err != nil {
			t.Fatal(err)
		}
	}
	pruneTestBins(cache, "e7")
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"e0", "e1", "e2", "e3", "e6", "e7"}; !slices.Equal(left, want) {
		t.Fatalf("after pruning: %v, want %v (the %d newest, the one in use, the one held)", left, want, testBinEntries)
	}
}

// The hash of a command's source is a stable, filename-safe key of its
// own: the gateway and the sandbox server never share an entry.
func TestSourceHashIsStable(t *testing.T) {
	t.Parallel()
	a, err := sourceHash("./cmd/gateway")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sourceHash("./cmd/gateway")
	if err != nil || a != b || len(a) != 32 {
		t.Fatalf("hashes %q and %q (%v), want the same 32 hex digits", a, b, err)
	}
	if c, err := sourceHash("./cmd/sandgate-sandbox"); err != nil || c == a {
		t.Fatalf("the sandbox server's hash %q (%v) is the gateway's", c, err)
	}
}

// A process that holds an entry it uses (a shared lock for its life) does
// not keep another process from using the same entry: only a build takes
// the exclusive lock. Before, every user asked for it first and waited for
// the holder to exit (a -count=200 loop of e2e tests held off every other
// package that needed the gateway for 11 minutes).
func TestHeldEntryDoesNotBlockAnotherUser(t *testing.T) {
	t.Parallel()
	entry := filepath.Join(t.TempDir(), "key")
	bin := filepath.Join(entry, "gateway")
	if err := os.MkdirAll(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("built"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := lockEntry(entry, syscall.LOCK_SH) // another test process's hold
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	got := make(chan error, 1)
	go func() {
		lock, err := holdEntry(entry, bin, "./cmd/none") // a build of it would fail
		if err == nil {
			lock.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second user of a held entry waited for the holder to let go")
	}
}
