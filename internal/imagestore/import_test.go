package imagestore

import (
	"errors"
	"io"
	"os"
	"testing"
)

// An importer that knows an image's diff IDs finds it stored without an
// export; an image not stored, or malformed IDs, are not found.
func TestStoredAndImportWritten(t *testing.T) {
	t.Parallel()
	s := newStore(t, Config{})
	img := buildImage(t, layerTar(t, file("usr/bin/tool", "v1")))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(cf.RootFS.DiffIDs))
	for i, h := range cf.RootFS.DiffIDs {
		ids[i] = h.String()
	}
	if _, ok := s.Stored(ids); ok {
		t.Fatal("found before it was imported")
	}
	archive := writeArchive(t, img)
	got, err := s.ImportWritten(t.Context(), func(w io.Writer) error {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if dir, ok := s.Stored(ids); !ok || dir != got.RootFS {
		t.Fatalf("Stored = %q %v, want the import's %q", dir, ok, got.RootFS)
	}
	if b, err := os.ReadFile(got.RootFS + "/usr/bin/tool"); err != nil || string(b) != "v1" {
		t.Fatalf("imported file: %q %v", b, err)
	}
	for _, bad := range [][]string{{"sha256:zz"}, {"not-a-digest"}, append(ids, ids[0])} {
		if _, ok := s.Stored(bad); ok {
			t.Errorf("Stored(%v) found something", bad)
		}
	}
	// A writer that fails imports nothing and leaves no temporary file.
	boom := errors.New("engine went away")
	if _, err := s.ImportWritten(t.Context(), func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("ImportWritten with a failing writer = %v", err)
	}
	if left, _ := os.ReadDir(s.tmp); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
