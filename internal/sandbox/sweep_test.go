package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The start-up sweep takes cut-off temporary files (createTemp's names,
// older than the start) and nothing else: not a user's look-alike, not a
// write that started after it, not what a symlink points at.
func TestSweepTemps(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	old := time.Now().Add(-time.Hour)
	write := func(dir, name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("x"), 0o644))
		must(t, os.Chtimes(p, mtime, mtime))
		return p
	}
	gone := []string{
		write(root, ".upload.sandgate-tmp-0123456789ab", old),
		write(root, "a/b/.report.pdf.sandgate-tmp-abcdefabcdef", old),
	}
	kept := []string{
		write(root, "upload.sandgate-tmp-0123456789ab", old),         // not hidden
		write(root, ".upload.sandgate-tmp-0123", old),                // not 12 hex
		write(root, ".upload.sandgate-tmp-0123456789ab.txt", old),    // not the end
		write(root, ".upload.sandgate-tmp-ffffffffffff", time.Now()), // after the start
		write(outside, ".x.sandgate-tmp-0123456789ab", old),
	}
	must(t, os.Symlink(outside, filepath.Join(root, "link")))
	n, err := sweepDir(context.Background(), root, time.Now().Add(-time.Minute))
	if err != nil || n != len(gone) {
		t.Fatalf("sweepDir = %d, %v; want %d", n, err, len(gone))
	}
	for _, p := range gone {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived the sweep", p)
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was swept: %v", p, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
