package imagestore

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandgate/sandgate/internal/testutil"
)

// registry is a real registry (Debian's docker-registry) behind a proxy
// that counts the blob downloads passing through it.
type registry struct {
	direct string // the registry's host:port, for pushes
	proxy  string // the counting proxy's host:port, for imports

	mu   sync.Mutex
	gets map[string]int // digest -> GETs of /v2/…/blobs/{digest}
}

func newRegistry(t *testing.T) *registry {
	t.Helper()
	r := &registry{direct: testutil.StartRegistry(t), gets: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: r.direct})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && path.Base(path.Dir(req.URL.Path)) == "blobs" {
			r.mu.Lock()
			r.gets[path.Base(req.URL.Path)]++
			r.mu.Unlock()
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.proxy = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// push writes img to the registry as repo:tag and returns its reference
// through the proxy.
func (r *registry) push(t *testing.T, img remote.Taggable, repo, tag string) string {
	t.Helper()
	ref, err := name.NewTag(r.direct + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	switch x := img.(type) {
	case v1.Image:
		err = remote.Write(ref, x, remote.WithContext(t.Context()))
	case v1.ImageIndex:
		err = remote.WriteIndex(ref, x, remote.WithContext(t.Context()))
	}
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return r.proxy + "/" + repo + ":" + tag
}

// layerGets counts the downloads of img's layers.
func (r *registry) layerGets(t *testing.T, img v1.Image) (n int) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		n += r.gets[d.String()]
	}
	return n
}

// TestImportRemote: an image pulled from a registry is stored like an
// archive's; pulled again, or under another tag with the same layers, it
// downloads no layer and gives the same rootfs.
func TestImportRemote(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t)
	img := buildImage(t, layerTar(t, dir("bin/"), file("bin/app", "app")), layerTar(t, file("etc/motd", "from the registry")))
	ref := reg.push(t, img, "sandgate/app", "v1")
	s := newStore(t, Config{})

	first, err := s.ImportRemote(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(first.RootFS, "etc/motd")); err != nil || string(got) != "from the registry" {
		t.Errorf("etc/motd = %q, %v", got, err)
	}
	wantID, _ := img.ConfigName()
	if first.ID != wantID.String() || strings.Join(first.Env, " ") != "PATH=/bin GREETING=hi" || first.User != "1000:1000" {
		t.Errorf("image = %+v, want ID %s and the test config", first, wantID)
	}
	if n := reg.layerGets(t, img); n != 2 {
		t.Errorf("first import downloaded layers %d times, want 2", n)
	}

	second, err := s.ImportRemote(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	// Same layers under another config and tag: the rootfs is shared.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Cmd = []string{"--other"}
	other, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	third, err := s.ImportRemote(t.Context(), reg.push(t, other, "sandgate/other", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if n := reg.layerGets(t, img); n != 2 {
		t.Errorf("imports of stored layers downloaded layers %d more times, want 0", n-2)
	}
	if !equalImages(first, second) || third.RootFS != first.RootFS || third.ID == first.ID {
		t.Errorf("imports differ:\n%+v\n%+v\n%+v", first, second, third)
	}
	if n := s.unpacks.Load(); n != 1 {
		t.Errorf("unpacks = %d, want 1", n)
	}
}

// TestImportRemotePlatform: from a multi-platform index, this machine's
// image is taken.
func TestImportRemotePlatform(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t)
	mine := buildImage(t, layerTar(t, file("arch", runtime.GOARCH)))
	foreign := buildImage(t, layerTar(t, file("arch", "s390x-or-other")))
	otherArch := "s390x"
	if runtime.GOARCH == otherArch {
		otherArch = "amd64"
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}}})
	s := newStore(t, Config{})
	got, err := s.ImportRemote(t.Context(), reg.push(t, idx, "sandgate/multi", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(got.RootFS, "arch")); err != nil || string(b) != runtime.GOARCH {
		t.Errorf("arch = %q, %v; want this machine's image (%s)", b, err, runtime.GOARCH)
	}
	if n := reg.layerGets(t, foreign); n != 0 {
		t.Errorf("the other platform's layer was downloaded %d times", n)
	}
}

// TestHostileLayersRemote: the same attacks served by a registry are
// refused (or defused) just as from an archive.
func TestHostileLayersRemote(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t)
	var tags atomic.Int64
	runHostile(t, func(t *testing.T, s *Store, img v1.Image) (Image, error) {
		tag := fmt.Sprintf("h%d", tags.Add(1))
		return s.ImportRemote(t.Context(), reg.push(t, img, "sandgate/hostile", tag))
	})
}

// TestImportRemoteErrors: what cannot be pulled fails clearly and leaves
// nothing in the store.
func TestImportRemoteErrors(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t)
	reg.push(t, buildImage(t, layerTar(t, file("a", "x"))), "sandgate/known", "v1")
	// A config past maxConfigBytes is refused before it is read.
	huge, err := mutate.Config(empty.Image, v1.Config{Env: []string{"PAD=" + strings.Repeat("x", maxConfigBytes)}})
	if err != nil {
		t.Fatal(err)
	}
	reg.push(t, huge, "sandgate/huge", "v1")
	for _, tc := range []struct {
		name, ref string
		want      []string
	}{
		{"unknown tag", reg.proxy + "/sandgate/known:nope", []string{"sandgate/known:nope", "MANIFEST_UNKNOWN"}},
		{"unknown repository", reg.proxy + "/sandgate/none:v1", []string{"sandgate/none:v1", "MANIFEST_UNKNOWN"}},
		{"bad reference", "UPPER/Case:tag", []string{"image reference", "UPPER/Case"}},
		{"config too large", reg.proxy + "/sandgate/huge:v1", []string{"sandgate/huge:v1", "config of", "image exceeds the store's bounds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, Config{})
			_, err := s.ImportRemote(t.Context(), tc.ref)
			mustContain(t, err, tc.want...)
			t.Logf("refused: %v", err)
			requireEmpty(t, s)
		})
	}
	// No registry listening: a connection error naming the image, not a hang.
	s := newStore(t, Config{})
	_, err = s.ImportRemote(t.Context(), fmt.Sprintf("127.0.0.1:%d/sandgate/known:v1", testutil.FreePort(t)))
	mustContain(t, err, "sandgate/known:v1", "connection refused")
	requireEmpty(t, s)
}
