package usage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

const mib = 1 << 20

// writeFile writes n non-zero bytes (no sparse blocks) at path.
func writeFile(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251 + 1)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func measure(t *testing.T, dir string, b Bounds) Usage {
	t.Helper()
	u, err := Measure(context.Background(), dir, b)
	if err != nil {
		t.Fatalf("measure %s: %v", dir, err)
	}
	return u
}

func TestMeasureCountsAllocatedBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "workspace", "a.bin"), 3*mib)
	writeFile(t, filepath.Join(dir, "outputs", "deep", "b.bin"), mib)
	u := measure(t, dir, Bounds{})
	if u.Bytes < 4*mib || u.Bytes > 4*mib+256<<10 {
		t.Fatalf("bytes %d, want 4 MiB plus a little for blocks and dirs", u.Bytes)
	}
	if u.Approximate || u.MeasuredAt.IsZero() {
		t.Fatalf("usage %+v: want exact and stamped", u)
	}
	// A sparse file allocates almost nothing, however large it claims to be.
	sparse, err := os.Create(filepath.Join(dir, "workspace", "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	if after := measure(t, dir, Bounds{}); after.Bytes-u.Bytes > mib {
		t.Fatalf("a 1 GiB sparse file counted as %d bytes: apparent size, not allocation", after.Bytes-u.Bytes)
	}
}

func TestMeasureCountsHardLinksOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "workspace", "a.bin")
	writeFile(t, file, 2*mib)
	before := measure(t, dir, Bounds{})
	for i := range 3 {
		if err := os.Link(file, filepath.Join(dir, "workspace", "link"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	after := measure(t, dir, Bounds{})
	if after.Bytes-before.Bytes >= mib {
		t.Fatalf("3 hard links added %d bytes: the file was counted more than once", after.Bytes-before.Bytes)
	}
}

func TestMeasureDoesNotFollowSymlinks(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "big", "big.bin"), 8*mib)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "workspace", "small"), 10)
	for name, target := range map[string]string{"to-file": filepath.Join(outside, "big", "big.bin"), "to-dir": filepath.Join(outside, "big")} {
		if err := os.Symlink(target, filepath.Join(dir, "workspace", name)); err != nil {
			t.Fatal(err)
		}
	}
	if u := measure(t, dir, Bounds{}); u.Bytes >= mib || u.Approximate {
		t.Fatalf("usage %+v: a symlink's target was counted", u)
	}
}

func TestMeasureBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 300 {
		writeFile(t, filepath.Join(dir, "workspace", strconv.Itoa(i)), 4096)
	}
	for _, tc := range []struct {
		name     string
		bounds   Bounds
		approx   bool
		minBytes int64
	}{
		{"unbounded", Bounds{}, false, 300 * 4096},
		{"entries", Bounds{MaxEntries: 10}, true, 0},
		{"time", Bounds{MaxTime: time.Nanosecond}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := measure(t, dir, tc.bounds)
			if u.Approximate != tc.approx || u.Bytes < tc.minBytes {
				t.Fatalf("usage %+v, want approximate=%v and at least %d bytes", u, tc.approx, tc.minBytes)
			}
			if tc.approx && u.Bytes >= 300*4096 {
				t.Fatalf("a bounded walk counted everything: %+v", u)
			}
		})
	}
}

func TestMeasureMissingDirAndCancel(t *testing.T) {
	t.Parallel()
	if u := measure(t, filepath.Join(t.TempDir(), "never-made"), Bounds{}); u.Bytes != 0 || u.Approximate {
		t.Fatalf("missing dir: %+v, want 0 exact", u)
	}
	dir := t.TempDir()
	for i := range 300 {
		writeFile(t, filepath.Join(dir, strconv.Itoa(i)), 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, dir, Bounds{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled walk: err %v, want context.Canceled", err)
	}
}

func TestMeterCachesAndSharesWalks(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	threadDir := backend.ThreadDir(dataDir, "alice", "t1")
	for i := range 500 {
		writeFile(t, filepath.Join(threadDir, "workspace", strconv.Itoa(i)), 100)
	}
	m := New(Config{DataDir: dataDir, Quota: 64 * mib})
	var wg sync.WaitGroup
	got := make([]Usage, 16)
	for i := range got {
		wg.Go(func() {
			u, err := m.Measure(context.Background(), "alice", "t1")
			if err != nil {
				t.Error(err)
			}
			got[i] = u
		})
	}
	wg.Wait()
	for _, u := range got[1:] {
		if !u.MeasuredAt.Equal(got[0].MeasuredAt) {
			t.Fatalf("concurrent measures walked more than once: %v vs %v", u.MeasuredAt, got[0].MeasuredAt)
		}
	}
	if got[0].Over(m.Quota()) {
		t.Fatalf("%d bytes over a 64 MiB quota", got[0].Bytes)
	}
	// Within the TTL, new files are not seen: the cache answers.
	writeFile(t, filepath.Join(threadDir, "outputs", "big"), 3*mib)
	if u, _ := m.Measure(context.Background(), "alice", "t1"); u != got[0] {
		t.Fatalf("cached measure changed within the TTL: %+v vs %+v", u, got[0])
	}
	if u, ok := m.Cached("alice", "t1"); !ok || u != got[0] {
		t.Fatalf("Cached: %+v %v", u, ok)
	}
}

func TestMeterCachedNeverWalks(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	writeFile(t, filepath.Join(backend.ThreadDir(dataDir, "bob", "t"), "uploads", "f"), 2*mib)
	m := New(Config{DataDir: dataDir, Quota: mib, TTL: time.Hour})
	if u, ok := m.Cached("bob", "t"); ok || u.Bytes != 0 {
		t.Fatalf("first Cached answered %+v: it walked on the hot path", u)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, ok := m.Cached("bob", "t")
		if ok {
			if u.Bytes < 2*mib || !u.Over(m.Quota()) {
				t.Fatalf("background measurement %+v: want ≥ 2 MiB, over a 1 MiB quota", u)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no background measurement after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMeterTTLExpires(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	threadDir := backend.ThreadDir(dataDir, "carol", "t")
	writeFile(t, filepath.Join(threadDir, "workspace", "a"), 10)
	m := New(Config{DataDir: dataDir, TTL: 50 * time.Millisecond})
	first, err := m.Measure(context.Background(), "carol", "t")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(threadDir, "workspace", "b"), mib)
	time.Sleep(60 * time.Millisecond)
	second, err := m.Measure(context.Background(), "carol", "t")
	if err != nil {
		t.Fatal(err)
	}
	if second.Bytes-first.Bytes < mib || second.Over(m.Quota()) {
		t.Fatalf("after the TTL: %d then %d bytes; want the new MiB seen and no quota", first.Bytes, second.Bytes)
	}
}

// TestMeterMeasureWithin: a fresher bound than the TTL walks again, and
// its walk is what the cache answers from then on.
func TestMeterMeasureWithin(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	threadDir := backend.ThreadDir(dataDir, "dave", "t")
	writeFile(t, filepath.Join(threadDir, "workspace", "a"), 10)
	m := New(Config{DataDir: dataDir, TTL: time.Hour})
	first, err := m.Measure(context.Background(), "dave", "t")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(threadDir, "workspace", "b"), 2*mib)
	if u, _ := m.MeasureWithin(context.Background(), "dave", "t", time.Hour); u != first {
		t.Fatalf("within an hour: %+v, want the cached %+v", u, first)
	}
	time.Sleep(10 * time.Millisecond)
	fresh, err := m.MeasureWithin(context.Background(), "dave", "t", 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Bytes-first.Bytes < 2*mib {
		t.Fatalf("within 5ms: %d then %d bytes, want the new 2 MiB seen", first.Bytes, fresh.Bytes)
	}
	if u, ok := m.Cached("dave", "t"); !ok || u != fresh {
		t.Fatalf("Cached after the fresh walk: %+v, want %+v", u, fresh)
	}
}

// Stale entries are swept once the cache holds sweepAt threads, at most
// once a TTL: a sweep per walk made each walk cost the whole cache (the
// sampler walks every thread every 5 s: quadratic in threads).
func TestMeterSweepsOnceATTL(t *testing.T) {
	t.Parallel()
	m := New(Config{DataDir: t.TempDir(), TTL: time.Hour})
	stale := func() {
		m.mu.Lock()
		for i := range sweepAt {
			m.cache[key{"old", strconv.Itoa(i)}] = Usage{MeasuredAt: time.Now().Add(-2 * time.Hour)}
		}
		m.mu.Unlock()
	}
	size := func() int {
		m.mu.RLock()
		defer m.mu.RUnlock()
		return len(m.cache)
	}
	ctx := context.Background()
	stale()
	if _, err := m.Measure(ctx, "u", "a"); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != 1 {
		t.Fatalf("after the first walk past sweepAt: %d entries, want 1 (the stale ones swept)", n)
	}
	stale()
	if _, err := m.Measure(ctx, "u", "b"); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != sweepAt+2 {
		t.Fatalf("a second walk within the TTL: %d entries, want %d (no second sweep)", n, sweepAt+2)
	}
	m.mu.Lock()
	m.swept = time.Now().Add(-time.Hour)
	m.mu.Unlock()
	if _, err := m.Measure(ctx, "u", "c"); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != 3 {
		t.Fatalf("a walk a TTL after the last sweep: %d entries, want 3", n)
	}
}
