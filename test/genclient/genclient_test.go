// Package genclient generates a Go client from the gateway's own
// /openapi.json with a common generator (oapi-codegen, pinned, fetched
// from the Go module proxy into Go's module cache) and runs it against a
// real gateway: the document is only as good as the client made from it.
package genclient

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The generators, pinned: a new version is a deliberate change of these
// lines.
const (
	OapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
	Ogen        = "github.com/ogen-go/ogen/cmd/ogen@v1.25.0"
)

// oapiRuntime is the generated client's one dependency.
const oapiRuntime = "github.com/oapi-codegen/runtime v1.9.0"

// TestGeneratedClient: oapi-codegen accepts /openapi.json, the client it
// generates compiles, and through it a program runs a command, writes,
// reads and lists files and makes a checkpoint on a real gateway (process
// backend, real redis-server), each answer decoded into the generated
// types. The sandbox part the sandbox serves through the thread,
// /threads/{t}/v1/openapi.json, is a valid document of every sandbox route.
func TestGeneratedClient(t *testing.T) {
	t.Parallel()
	g := testutil.StartGateway(t)
	doc := get(t, g, "/openapi.json")
	sandboxDoc := get(t, g, "/threads/gen-thread/v1/openapi.json")
	loaded, err := openapi3.NewLoader().LoadFromData(sandboxDoc)
	if err != nil {
		t.Fatalf("the sandbox's document: %v", err)
	}
	if err := loaded.Validate(context.Background()); err != nil {
		t.Fatalf("the sandbox's document is not valid: %v", err)
	}
	if n, want := loaded.Paths.Len(), len(paths()); n != want {
		t.Errorf("the sandbox's document has %d paths, the sandbox API %d", n, want)
	}

	dir := t.TempDir()
	write(t, filepath.Join(dir, "openapi.json"), string(doc))
	write(t, filepath.Join(dir, "go.mod"), "module gen\n\ngo 1.24\n\nrequire "+oapiRuntime+"\n")
	src, err := os.ReadFile(filepath.Join("testdata", "main.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "main.go"), string(src))
	if err := os.Mkdir(filepath.Join(dir, "sgclient"), 0o755); err != nil {
		t.Fatal(err)
	}
	gen := goCmd(t, dir, nil, "run", OapiCodegen, "-generate", "types,client", "-package", "sgclient",
		"-o", filepath.Join("sgclient", "client.gen.go"), "openapi.json")
	t.Logf("oapi-codegen: %s", gen)
	goCmd(t, dir, nil, "mod", "tidy")
	out := goCmd(t, dir, []string{"SANDGATE_URL=" + g.URL, "SANDGATE_KEY=" + g.Key, "SANDGATE_THREAD=gen-thread"}, "run", ".")

	want := []string{
		`exec completed 0 "hello from 42\n"`,
		`write /mnt/user-data/workspace/gen.txt 10`,
		`read "generated\n"`,
		`list gen.txt false`,
		`checkpoint ck-`,
		`checkpoints ck-`,
		`destroy 204`,
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the generated client's program printed no %q:\n%s", w, out)
		}
	}
}

// TestOgenClient: ogen, the other common Go generator, accepts
// /openapi.json too (it refuses type arrays and complex anyOf), and a
// command runs through the client it generates.
func TestOgenClient(t *testing.T) {
	t.Parallel()
	g := testutil.StartGateway(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "openapi.json"), string(get(t, g, "/openapi.json")))
	write(t, filepath.Join(dir, "go.mod"), "module gen\n\ngo 1.24\n")
	src, err := os.ReadFile(filepath.Join("testdata", "ogen_main.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "main.go"), string(src))
	goCmd(t, dir, nil, "run", Ogen, "--target", "ogclient", "--package", "ogclient", "--clean", "openapi.json")
	goCmd(t, dir, nil, "mod", "tidy")
	out := goCmd(t, dir, []string{"SANDGATE_URL=" + g.URL, "SANDGATE_KEY=" + g.Key, "SANDGATE_THREAD=ogen-thread"}, "run", ".")
	if want := `ogen exec completed 0 "ogen says 42\n"`; !strings.Contains(out, want) {
		t.Errorf("the ogen client's program printed no %q:\n%s", want, out)
	}
}

func paths() map[string]bool {
	m := map[string]bool{}
	for _, e := range sandboxspec.Endpoints {
		m[e.Path] = true
	}
	return m
}

func get(t *testing.T, g *testutil.Gateway, path string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+g.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", path, res.StatusCode, err, body)
	}
	return body
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// goCmd runs the go command in dir, outside this module (GOWORK off), with
// env added; 10 minutes at most (a cold module cache downloads and builds
// the generator and its dependencies: ogen's run took 4 minutes on the
// loaded 2-core machine, most of it compiling ogen and the ~60k-line
// client).
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
