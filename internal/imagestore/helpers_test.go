package imagestore

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is one tar entry of a hand-made layer: hdr with body as content.
type entry struct {
	hdr  tar.Header
	body string
}

func dir(name string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func file(name, body string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
}

func symlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}}
}

// layerTar writes entries as an uncompressed layer tar.
func layerTar(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatalf("tar header %q: %v", hdr.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testConfig is the config the test images carry.
var testConfig = v1.Config{
	Env:        []string{"PATH=/bin", "GREETING=hi"},
	Entrypoint: []string{"/bin/app"},
	Cmd:        []string{"--serve"},
	WorkingDir: "/work",
	User:       "1000:1000",
}

// buildImage makes a real image (gzip layers, config with diff IDs) of
// the layer tars, bottom first.
func buildImage(t *testing.T, layers ...[]byte) v1.Image {
	t.Helper()
	img, err := mutate.Config(empty.Image, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range layers {
		l, err := tarball.LayerFromReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// writeArchive writes img as a docker save style tarball and returns its path.
func writeArchive(t *testing.T, img v1.Image) string {
	t.Helper()
	ref, err := name.NewTag("imagestore.test/image:latest")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// archiveOf builds an image of the layer tars and writes it as a tarball.
func archiveOf(t *testing.T, layers ...[]byte) string {
	t.Helper()
	return writeArchive(t, buildImage(t, layers...))
}

// newStore opens a store in a new directory; cleanup restores write bits
// so the directory can go when the tests do not run as root.
func newStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	cfg.Dir = t.TempDir()
	t.Cleanup(func() { _ = removeTree(cfg.Dir) })
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rootfsNames lists {Dir}/rootfs/sha256 and {Dir}/tmp: what an import left.
func rootfsNames(t *testing.T, s *Store) (names []string) {
	t.Helper()
	for _, d := range []string{s.rootfs, s.tmp} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	return names
}

// requireEmpty fails the test when a failed import left anything.
func requireEmpty(t *testing.T, s *Store) {
	t.Helper()
	if names := rootfsNames(t, s); len(names) != 0 {
		t.Errorf("a failed import left %v in the store", names)
	}
}

// sentinel makes a directory outside the store with a file "sentinel" in
// it and returns the directory; cleanup fails the test if the file changed
// or anything else appeared there.
func sentinel(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "sentinel"), []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ents, _ := os.ReadDir(d)
		if len(ents) != 1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("outside directory holds %v, want only sentinel", names)
		}
		got, err := os.ReadFile(filepath.Join(d, "sentinel"))
		if err != nil || string(got) != "untouched" {
			t.Errorf("outside sentinel = %q, %v; want untouched", got, err)
		}
		if fi, err := os.Lstat(filepath.Join(d, "sentinel")); err == nil && fi.Mode() != 0o644 {
			t.Errorf("outside sentinel mode = %v, want -rw-r--r--", fi.Mode())
		}
	})
	return d
}

func readLink(t *testing.T, p string) string {
	t.Helper()
	target, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("import succeeded; want an error with %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}
