package testutil

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestImageLabel marks images the tests built, so they can be found and pruned.
const TestImageLabel = "io.sandgate.test-image"

var (
	dockerOnce sync.Once
	dockerErr  error

	imageOnce sync.Once
	imageTag  string
	imageErr  error
)

// DockerClient returns a client of the engine the tests use (DOCKER_HOST or
// the default socket, API version negotiated), closed at cleanup.
func DockerClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := newDockerClient()
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newDockerClient() (*client.Client, error) {
	return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
}

// RequireDocker skips the test when no Docker engine answers, or fails it
// under CI=true.
func RequireDocker(t testing.TB) {
	t.Helper()
	dockerOnce.Do(func() {
		c, err := newDockerClient()
		if err != nil {
			dockerErr = err
			return
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, dockerErr = c.Ping(ctx)
	})
	what := "a Docker engine"
	if dockerErr != nil {
		what += " (" + dockerErr.Error() + ")"
	}
	Require(t, dockerErr == nil, what)
}

// SandboxImage builds the small sandbox image (deployments/sandbox-image:
// FROM scratch, static busybox, the sandgate-sandbox binary) once per test process
// and returns its tag. The tag is the content hash of the build context, so
// an unchanged binary reuses the image and parallel test processes agree.
func SandboxImage(t testing.TB) string {
	t.Helper()
	RequireDocker(t)
	bin := SandboxBinary(t)
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		imageTag, imageErr = BuildSandboxImage(ctx, bin)
	})
	if imageErr != nil {
		t.Fatalf("sandbox image: %v", imageErr)
	}
	return imageTag
}

// SaveImage exports image from the engine as a `docker save` archive in a
// temp dir of the test, and returns its path.
func SaveImage(t testing.TB, image string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := saveImage(ctx, image, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildSandboxImage builds the small sandbox image around serverBin, a
// build of cmd/sandgate-sandbox (unless an image with the same content tag
// exists), and returns its tag.
func BuildSandboxImage(ctx context.Context, serverBin string) (string, error) {
	busybox, err := StaticBusybox()
	if err != nil {
		return "", err
	}
	var files []imageFile
	for _, f := range []struct{ name, path string }{
		{"Dockerfile", filepath.Join(ModuleRoot(), "deployments", "sandbox-image", "Dockerfile")},
		{"busybox", busybox},
		{sandboxspec.ServerBinary, serverBin},
	} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return "", fmt.Errorf("build context: %w", err)
		}
		files = append(files, imageFile{f.name, data})
	}
	return buildTestImage(ctx, "sandgate-sandbox", files)
}

// DerivedImage builds "FROM base" plus lines (Dockerfile instructions
// that add nothing from a context: LABEL, ENTRYPOINT, RUN of what base
// has) and returns its tag, named after its content like the sandbox
// image's, so parallel test processes share one build.
func DerivedImage(t testing.TB, base, lines string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tag, err := buildTestImage(ctx, "sandgate-test-derived", []imageFile{{"Dockerfile", []byte("FROM " + base + "\n" + lines + "\n")}})
	if err != nil {
		t.Fatalf("derived image: %v", err)
	}
	return tag
}

// imageFile is a file of a build context.
type imageFile struct {
	name string
	data []byte
}

// buildTestImage builds files (a Dockerfile among them) as repo:test-{the
// content hash} unless that image exists, labelled TestImageLabel, and
// returns the tag; older builds of repo are pruned.
func buildTestImage(ctx context.Context, repo string, files []imageFile) (string, error) {
	h := sha256.New()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		fmt.Fprintf(h, "%s %d\n", f.name, len(f.data))
		h.Write(f.data)
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(f.data))}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	tag := repo + ":test-" + hex.EncodeToString(h.Sum(nil))[:16]

	c, err := newDockerClient()
	if err != nil {
		return "", err
	}
	defer c.Close()
	// Test packages run in parallel processes: one builds, the others wait
	// and find the image (two builds of one tag would leave a dangling image).
	unlock, err := lockFile(filepath.Join(os.TempDir(), "sandgate-"+strings.ReplaceAll(tag, ":", "-")+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := c.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}
	resp, err := c.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1,
		Labels: map[string]string{TestImageLabel: "true"},
	})
	if err != nil {
		return "", fmt.Errorf("build %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := buildResult(resp.Body); err != nil {
		return "", fmt.Errorf("build %s: %w", tag, err)
	}
	pruneTestImages(ctx, c, tag)
	return tag, nil
}

// pruneTestImages removes the images of keep's repository earlier test
// runs built (other content tags, more than an hour old, so a concurrent
// run of another checkout keeps its own); one in use by a container is
// left alone.
func pruneTestImages(ctx context.Context, c *client.Client, keep string) {
	imgs, err := c.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", TestImageLabel+"=true"))})
	if err != nil {
		return
	}
	repo, _, _ := strings.Cut(keep, ":")
	for _, img := range imgs {
		if time.Since(time.Unix(img.Created, 0)) < time.Hour {
			continue
		}
		tags := slices.DeleteFunc(slices.Clone(img.RepoTags), func(t string) bool { return t == "<none>:<none>" })
		if len(tags) == 0 { // dangling: its tag moved on
			_, _ = c.ImageRemove(ctx, img.ID, image.RemoveOptions{PruneChildren: true})
		}
		for _, tag := range tags {
			if tag != keep && strings.HasPrefix(tag, repo+":test-") {
				_, _ = c.ImageRemove(ctx, tag, image.RemoveOptions{PruneChildren: true})
			}
		}
	}
}

// buildResult reads a build's JSON stream to its end and returns the error
// it reports, with the build output for context.
func buildResult(r io.Reader) error {
	var out bytes.Buffer
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		out.WriteString(m.Stream)
		if m.Error != "" {
			return fmt.Errorf("%s\n%s", m.Error, out.String())
		}
	}
}

// StaticBusybox finds a statically linked busybox (Debian's busybox-static);
// a dynamic one would not run in a FROM scratch image.
func StaticBusybox() (string, error) {
	path := "/bin/busybox"
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath("busybox"); err != nil {
			return "", errors.New("no busybox: install Debian's busybox-static (`make test` does)")
		}
	}
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("busybox %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("busybox %s is dynamically linked: install busybox-static", path)
		}
	}
	return path, nil
}

// lockFile holds an exclusive flock on path until the returned func is called.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("image build lock: %w", err)
	}
	return func() { _ = f.Close() }, nil
}
