package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandgate/sandgate/internal/testutil"
)

// A process gateway's template whose image is on no Docker engine, only in
// a registry (a real one on loopback), is pulled from it at start-up, with
// the engine answering not-found or absent altogether; its sandboxes run
// on the image's files.
func TestTemplatesRegistry(t *testing.T) {
	t.Parallel()
	archive := testutil.SaveImage(t, testutil.SandboxImage(t))
	addr := testutil.StartRegistry(t)
	marker := randomHex(8)
	ref := pushMarked(t, archive, addr+"/sandgate-template:"+marker, marker)
	cfg := writeTemplates(t, fmt.Sprintf("templates:\n  - name: pulled\n    image: %s\ndefault_template: pulled\n", ref))

	for _, tc := range []struct {
		name, engine string
		args         []string
	}{
		{"engine lacks the image", "image not found", nil},
		{"no engine", "unreachable", []string{"--docker-host", "unix://" + filepath.Join(t.TempDir(), "none.sock")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newFleet(t, append([]string{"--config", cfg}, tc.args...)...).start()
			logs := g.logs.String()
			if !strings.Contains(logs, `"source":"registry"`) || !strings.Contains(logs, `"engine":"`+tc.engine+`"`) {
				t.Errorf("the log does not say the image came from the registry (engine %s):\n%s", tc.engine, tail(logs, 20))
			}
			out, code := run(t, g, "pulled", "cat /usr/share/sandgate-marker && echo && ls /bin/busybox")
			if code != 0 || strings.TrimSpace(out) != marker+"\n/bin/busybox" {
				t.Errorf("sandbox of the pulled template: exit %d: %q, want the image's marker %s", code, out, marker)
			}
		})
	}
}

// pushMarked pushes the image of archive plus a layer holding
// /usr/share/sandgate-marker to ref, straight to the registry (the engine never
// sees it).
func pushMarked(t *testing.T, archive, ref, marker string) string {
	t.Helper()
	base, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "usr/share/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "usr/share/sandgate-marker", Mode: 0o644, Size: int64(len(marker))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write([]byte(marker)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}
