package imagestore

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/sandgate/sandgate/internal/testutil"
)

// Environment of a child process importing an archive (TestMain).
const (
	childDirEnv     = "IMAGESTORE_CHILD_DIR"
	childArchiveEnv = "IMAGESTORE_CHILD_ARCHIVE"
)

// TestMain lets TestConcurrentImports run this binary as a second process
// importing into the same store.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := Open(Config{Dir: dir})
		if err == nil {
			var img Image
			if img, err = s.ImportArchive(ctx, os.Getenv(childArchiveEnv)); err == nil {
				err = json.NewEncoder(os.Stdout).Encode(img)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			cancel()
			os.Exit(1)
		}
		cancel()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Dir is required"},
		{Config{Dir: "x", MaxBytes: -1}, "MaxBytes"},
		{Config{Dir: "x", MaxEntries: -1}, "MaxEntries"},
		{Config{Dir: "x"}, ""},
	} {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := Open(Config{}); err == nil {
		t.Error("Open with no Dir succeeded")
	}
	s := newStore(t, Config{})
	if s.cfg.MaxBytes != DefaultMaxBytes || s.cfg.MaxEntries != DefaultMaxEntries {
		t.Errorf("zero Config gave %+v, want the defaults", s.cfg)
	}
}

// TestWhiteouts flattens two layers: the upper one deletes a file, a
// directory and (opaque) a directory's lower contents, keeping its own.
func TestWhiteouts(t *testing.T) {
	t.Parallel()
	lower := layerTar(t,
		file("a/keep", "k"), file("a/gone", "g"),
		file("b/x", "x"), file("b/sub/y", "y"),
		file("d/old", "o"), file("c", "file"),
		file("r/kept", "r"),
	)
	upper := layerTar(t,
		file("a/.wh.gone", ""),
		file(".wh.d", ""),
		file("b/sub/z", "z"), // before the opaque marker: still this layer's
		file("b/.wh..wh..opq", ""),
		file("b/new", "n"),
		dir("c/"), file("c/inside", "c is a directory now"),
		file("r/.wh.never-existed", ""),
	)
	s := newStore(t, Config{})
	img, err := s.ImportArchive(t.Context(), archiveOf(t, lower, upper))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = filepath.WalkDir(img.RootFS, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(img.RootFS, p)
		if !d.IsDir() {
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/keep", "b/new", "b/sub/z", "c/inside", "r/kept"}
	if !slices.Equal(got, want) {
		t.Errorf("flattened files = %v, want %v", got, want)
	}
}

// TestReimportUnpacksNothing: the same content imported again, by the same
// store or another one on its directory, is found, not unpacked; an image
// with another config but the same layers shares the rootfs.
func TestReimportUnpacksNothing(t *testing.T) {
	t.Parallel()
	layer := layerTar(t, file("bin/app", "app"))
	path := archiveOf(t, layer)
	s := newStore(t, Config{})
	first, err := s.ImportArchive(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	fi1, err := os.Stat(filepath.Join(first.RootFS, "bin/app"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.ImportArchive(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	third, err := other.ImportArchive(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.unpacks.Load() + other.unpacks.Load(); n != 1 {
		t.Errorf("three imports of one image unpacked %d times, want 1", n)
	}
	if !equalImages(first, second) || !equalImages(first, third) {
		t.Errorf("imports differ:\n%+v\n%+v\n%+v", first, second, third)
	}
	fi2, err := os.Stat(filepath.Join(third.RootFS, "bin/app"))
	if err != nil || !os.SameFile(fi1, fi2) || fi2.ModTime() != fi1.ModTime() {
		t.Errorf("bin/app was rewritten: %v", err)
	}

	// Same layers, another config: another ID, the same rootfs.
	img := buildImage(t, layer)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Cmd = []string{"--other"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	fourth, err := s.ImportArchive(t.Context(), writeArchive(t, img))
	if err != nil {
		t.Fatal(err)
	}
	if fourth.ID == first.ID || fourth.RootFS != first.RootFS || !slices.Equal(fourth.Cmd, []string{"--other"}) {
		t.Errorf("same layers, other config: %+v vs %+v", fourth, first)
	}
	if n := s.unpacks.Load(); n != 1 {
		t.Errorf("unpacks = %d after an image with the same layers, want 1", n)
	}
}

func equalImages(a, b Image) bool {
	return a.ID == b.ID && a.RootFS == b.RootFS && slices.Equal(a.Env, b.Env) &&
		slices.Equal(a.Entrypoint, b.Entrypoint) && slices.Equal(a.Cmd, b.Cmd) &&
		a.WorkingDir == b.WorkingDir && a.User == b.User
}

// TestImportFormats: a docker save archive, an OCI layout directory and an
// OCI layout archive of the same image give the same Image, with its config
// and a read-only rootfs.
func TestImportFormats(t *testing.T) {
	t.Parallel()
	img := buildImage(t, layerTar(t, file("bin/app", "app"), dir("work/")))
	layoutDir := t.TempDir()
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ociArchive := tarDir(t, layoutDir)

	s := newStore(t, Config{})
	fromDocker, err := s.ImportArchive(t.Context(), writeArchive(t, img))
	if err != nil {
		t.Fatal(err)
	}
	fromLayout, err := s.ImportLayout(t.Context(), layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	fromOCI, err := s.ImportArchive(t.Context(), ociArchive)
	if err != nil {
		t.Fatal(err)
	}
	if !equalImages(fromDocker, fromLayout) || !equalImages(fromDocker, fromOCI) {
		t.Errorf("formats differ:\n%+v\n%+v\n%+v", fromDocker, fromLayout, fromOCI)
	}
	digest, _ := img.ConfigName()
	want := Image{ID: digest.String(), RootFS: fromDocker.RootFS, Env: testConfig.Env, Entrypoint: testConfig.Entrypoint,
		Cmd: testConfig.Cmd, WorkingDir: testConfig.WorkingDir, User: testConfig.User}
	if !equalImages(fromDocker, want) {
		t.Errorf("Image = %+v, want %+v", fromDocker, want)
	}
	if !strings.HasPrefix(fromDocker.RootFS, filepath.Join(s.cfg.Dir, "rootfs", "sha256")+"/") {
		t.Errorf("RootFS %s is not under {Dir}/rootfs/sha256", fromDocker.RootFS)
	}
	for _, n := range []string{".", "bin", "bin/app", "work"} {
		fi, err := os.Lstat(filepath.Join(fromDocker.RootFS, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o222 != 0o200 {
			t.Errorf("%s mode %v is writable by others than the owner, or not by the owner", n, fi.Mode())
		}
	}
	if names := rootfsNames(t, s); len(names) != 1 {
		t.Errorf("store holds %v, want one rootfs", names)
	}

	// Not an image at all: a clear error, nothing left.
	_, err = s.ImportArchive(t.Context(), tarDir(t, t.TempDir()))
	mustContain(t, err, "neither a docker save archive")
	if names := rootfsNames(t, s); len(names) != 1 {
		t.Errorf("a failed import left %v", names)
	}
}

// tarDir packs dir (directories and regular files) into a tar file.
func tarDir(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "layout.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOCIArchiveSymlinkRefused: an OCI layout archive may not hold a
// symlink, which could point the layout reader at a host file.
func TestOCIArchiveSymlinkRefused(t *testing.T) {
	t.Parallel()
	out := sentinel(t)
	var tars []entry
	tars = append(tars, file("oci-layout", `{"imageLayoutVersion":"1.0.0"}`), symlink("index.json", filepath.Join(out, "sentinel")))
	p := filepath.Join(t.TempDir(), "oci.tar")
	if err := os.WriteFile(p, layerTar(t, tars...), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{})
	_, err := s.ImportArchive(t.Context(), p)
	mustContain(t, err, `"index.json"`, "only directories and regular files")
	requireEmpty(t, s)
}

// TestConcurrentImports: two goroutines and two processes import the same
// archive at once; all get the same Image and one rootfs, no temp dir stays.
func TestConcurrentImports(t *testing.T) {
	t.Parallel()
	var many []entry
	for i := range 2000 {
		many = append(many, file(fmt.Sprintf("d%d/f%d", i%20, i), strings.Repeat("x", 1024)))
	}
	path := archiveOf(t, layerTar(t, many...))
	s := newStore(t, Config{})

	var wg sync.WaitGroup
	results := make([]Image, 4)
	errs := make([]error, 4)
	for i := range 2 {
		wg.Go(func() { results[i], errs[i] = s.ImportArchive(t.Context(), path) })
	}
	for i := 2; i < 4; i++ {
		wg.Go(func() {
			cmd := exec.CommandContext(t.Context(), os.Args[0])
			cmd.Env = append(os.Environ(), childDirEnv+"="+s.cfg.Dir, childArchiveEnv+"="+path)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("child: %w: %s", err, stderr.String())
				return
			}
			errs[i] = json.Unmarshal(out, &results[i])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, r := range results[1:] {
		if !equalImages(r, results[0]) {
			t.Errorf("concurrent imports differ: %+v vs %+v", r, results[0])
		}
	}
	if names := rootfsNames(t, s); len(names) != 1 || strings.HasPrefix(names[0], ".tmp-") {
		t.Errorf("store holds %v, want one rootfs and no temp dir", names)
	}
	t.Logf("unpacked %d times by this process's goroutines", s.unpacks.Load())
}

// TestSandboxImage imports the sandbox image exported by the Docker
// engine: its binaries are in the rootfs, its config in the Image.
func TestSandboxImage(t *testing.T) {
	t.Parallel()
	tag := testutil.SandboxImage(t)
	path := testutil.SaveImage(t, tag)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	s := newStore(t, Config{})
	start := time.Now()
	img, err := s.ImportArchive(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	start = time.Now()
	if _, err := s.ImportArchive(ctx, path); err != nil {
		t.Fatal(err)
	}
	var size int64
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	t.Logf("imported %s (%s, a %d MB archive): %v; again (stored): %v", tag, img.ID, size>>20, took, time.Since(start))

	for _, bin := range []string{"bin/busybox", "sandgate-sandbox"} {
		fi, err := os.Lstat(filepath.Join(img.RootFS, bin))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 || fi.Mode()&0o222 != 0o200 {
			t.Errorf("/%s: %v, %v; want an executable only its owner may write", bin, fi, err)
		}
	}
	if target := readLink(t, filepath.Join(img.RootFS, "bin/sh")); !strings.HasSuffix(target, "busybox") {
		t.Errorf("/bin/sh -> %q, want busybox", target)
	}
	if !slices.Equal(img.Entrypoint, []string{"/sandgate-sandbox", "sandbox"}) {
		t.Errorf("Entrypoint = %q", img.Entrypoint)
	}
	if !slices.Contains(img.Env, "PATH=/usr/local/bin:/usr/bin:/bin") {
		t.Errorf("Env = %q, want the Dockerfile's PATH", img.Env)
	}
	if s.unpacks.Load() != 1 {
		t.Errorf("unpacks = %d, want 1", s.unpacks.Load())
	}
}
