package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/imagestore"
	"github.com/sandgate/sandgate/internal/testutil"
)

// Templates (issue 38): the operator's templates are chosen per create,
// the Python image's userland and the host's side by side on one gateway,
// each with its own env and memory limit; a create's own env reaches its
// commands, and what a user may not change is refused before anything is
// stored or started.

// templatesKeys: alice may use threads; ops is an admin.
var templatesKeys = "ops=" + sha("ops-key") + ":threads+admin,alice=" + sha("alice-key")

// writeTemplates writes a gateway config file holding body.
func writeTemplates(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "templates.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTemplatesProcess(t *testing.T) {
	t.Parallel()
	tag, archive := testutil.PythonImage(t)
	cfg := writeTemplates(t, fmt.Sprintf(`templates:
  - name: python
    rootfs: %s
    env: {TEMPLATE_MARK: python-template}
  - name: small
    env: {TEMPLATE_MARK: small-template}
    memory: 96m
    max_memory: 128m
default_template: small
`, archive))
	f := newFleet(t, "--config", cfg, "--auth-api-keys", templatesKeys)
	// Imported ahead, as in TestPythonImage: the gateway then finds it stored.
	store, err := imagestore.Open(imagestore.Config{Dir: filepath.Join(f.dataDir, "images")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	img, err := store.ImportArchive(ctx, archive)
	if err != nil {
		t.Fatal(err)
	}
	g := f.start()
	checkTemplates(t, g, tag, f.dataDir, archive)
	checkImageLayer(t, g, img.RootFS)

	// The default template's memory limit stops a hog the host would let run.
	out, _ := run(t, g, "tpl-hog", "python3 -c \"b = b'x' * (512 << 20); print('ALLOCATED', len(b))\" 2>&1; echo rc=$?", "Authorization", "Bearer alice-key")
	if strings.Contains(out, "ALLOCATED 536870912") || !strings.Contains(out, "rc=137") {
		t.Errorf("a 512 MiB hog ran in template small (memory 96m): %s", out)
	}
}

// TestTemplatesDocker: the same templates as container images, one gateway.
func TestTemplatesDocker(t *testing.T) {
	t.Parallel()
	tag, _ := testutil.PythonImage(t)
	d := newDockerEnv(t)
	cfg := writeTemplates(t, fmt.Sprintf(`templates:
  - name: python
    image: %s
    env: {TEMPLATE_MARK: python-template}
  - name: small
    image: %s
    env: {TEMPLATE_MARK: small-template}
    memory: 96m
    max_memory: 128m
default_template: small
`, tag, d.image))
	g := d.fleet("--config", cfg, "--auth-api-keys", templatesKeys).start()
	checkTemplates(t, g, tag, "", "")
	run(t, g, "tpl-small", "true", "Authorization", "Bearer alice-key")
	code, body, _ := call(t, "GET", g.URL+"/threads/tpl-small/sandbox", nil, "Authorization", "Bearer alice-key")
	var sb struct {
		SandboxID string `json:"sandbox_id"`
	}
	if code != 200 || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("GET sandbox: %d %s", code, body)
	}
	c, err := d.api.ContainerInspect(t.Context(), d.prefix+"-"+sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.Image != d.image || c.HostConfig.Memory != 96<<20 {
		t.Errorf("template small's container: image %s memory %d, want %s and %d", c.Config.Image, c.HostConfig.Memory, d.image, 96<<20)
	}
}

// checkTemplates runs the checks both backends share on g, whose templates
// are python (image tag) and the default, small. secrets are strings no
// answer may contain (host paths).
func checkTemplates(t *testing.T, g *gateway, tag string, secrets ...string) {
	t.Helper()
	alice := []string{"Authorization", "Bearer alice-key"}
	code, body, _ := call(t, "GET", g.URL+"/api/templates", nil, alice...)
	var list struct {
		Default   string `json:"default"`
		Templates []struct {
			Name      string   `json:"name"`
			Default   bool     `json:"default"`
			Memory    int64    `json:"memory"`
			MaxMemory int64    `json:"max_memory"`
			EnvNames  []string `json:"env_names"`
		} `json:"templates"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || list.Default != "small" || len(list.Templates) != 2 ||
		list.Templates[0].Name != "python" || !list.Templates[1].Default || list.Templates[1].MaxMemory != 128<<20 ||
		strings.Join(list.Templates[0].EnvNames, ",") != "TEMPLATE_MARK" {
		t.Fatalf("GET /api/templates: %d %s", code, body)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(string(body), s) {
			t.Errorf("GET /api/templates shows the host path %s: %s", s, body)
		}
	}

	// What a user may not do is refused whole, naming the field, and
	// nothing is stored or started.
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		field  string
	}{
		{"unknown template", map[string]any{"template": "nope"}, 400, "template"},
		{"memory past the ceiling", map[string]any{"template": "small", "memory": 1 << 30}, 403, "memory"},
		{"negative memory", map[string]any{"memory": -1}, 400, "memory"},
		{"memory of a template without a limit", map[string]any{"template": "python", "memory": 64 << 20}, 403, "memory"},
		{"proxy env steers egress", map[string]any{"env": map[string]string{"HTTPS_PROXY": "http://127.0.0.1:1"}}, 403, "env"},
		{"the server's own env", map[string]any{"env": map[string]string{"SANDGATE_SANDBOX_SECRET": "x"}}, 403, "env"},
		{"bad env name", map[string]any{"env": map[string]string{"A=B": "x"}}, 400, "env"},
		{"egress without admin", map[string]any{"template": "python", "egress": map[string]any{"mode": "open"}}, 403, ""},
		{"unknown field", map[string]any{"timeout": 5}, 400, ""},
	} {
		code, body, _ := call(t, "PUT", g.URL+"/threads/tpl-refused/sandbox", tc.body, alice...)
		var e struct {
			Error struct{ Code, Field string } `json:"error"`
		}
		if code != tc.status || json.Unmarshal(body, &e) != nil || e.Error.Field != tc.field {
			t.Errorf("%s: %d %s, want %d naming field %q", tc.name, code, body, tc.status, tc.field)
		}
	}
	if code, body, _ := call(t, "GET", g.URL+"/threads/tpl-refused/sandbox", nil, alice...); code != 404 {
		t.Errorf("a refused create left a sandbox: %d %s", code, body)
	}

	// Template python with an env and metadata of the create's own.
	const thread = "tpl-py"
	code, body, _ = call(t, "PUT", g.URL+"/threads/"+thread+"/sandbox", map[string]any{"template": "python",
		"env": map[string]string{"PER_CREATE": "c1"}, "metadata": map[string]string{"agent": "a7"}}, alice...)
	var sb struct {
		Template string            `json:"template"`
		Metadata map[string]string `json:"metadata"`
	}
	if code != 200 || json.Unmarshal(body, &sb) != nil || sb.Template != "python" {
		t.Fatalf("PUT template python: %d %s", code, body)
	}
	const marker = "/usr/share/sandgate/image"
	py := `python3 -c 'import sys; print(sys.prefix, sys.version_info[:2], open("` + marker + `").read().strip())'`
	if out, code := run(t, g, thread, py, alice...); code != 0 || !strings.Contains(out, "/usr (3, 11) "+tag) {
		t.Errorf("template python's python3: exit %d: %q, want the image's (%s)", code, out, tag)
	}
	if out, _ := run(t, g, thread, `echo "$TEMPLATE_MARK $PER_CREATE"`, alice...); strings.TrimSpace(out) != "python-template c1" {
		t.Errorf("template and create env: %q", out)
	}
	code, body, _ = call(t, "GET", g.URL+"/threads/"+thread+"/sandbox", nil, alice...)
	if code != 200 || json.Unmarshal(body, &sb) != nil || sb.Template != "python" || sb.Metadata["agent"] != "a7" {
		t.Errorf("GET shows template %q metadata %v: %d %s", sb.Template, sb.Metadata, code, body)
	}

	// A wheel built here, pip-installed, survives a destroy: the next
	// request recreates the thread's sandbox from its stored template.
	whl := "sgprobe-1.0-py3-none-any.whl"
	install := fmt.Sprintf("echo %s | base64 -d > %s && python3 -m pip install --user --no-index --break-system-packages %s",
		base64.StdEncoding.EncodeToString(probeWheel(t)), whl, whl)
	if out, code := run(t, g, thread, install, alice...); code != 0 {
		t.Fatalf("pip install: exit %d: %s", code, out)
	}
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/"+thread+"/sandbox?destroy=true", nil, alice...); code/100 != 2 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	out, code := run(t, g, thread, "python3 -c 'import sgprobe; print(sgprobe.MARK)' && echo $TEMPLATE_MARK $PER_CREATE && cat "+marker, alice...)
	if code != 0 || !strings.Contains(out, "sgprobe-ok\npython-template c1\n"+tag) {
		t.Errorf("after destroy and recreate: exit %d: %q", code, out)
	}

	// A metadata change keeps the running sandbox; a template change
	// replaces it, and the thread's files stay.
	if out, code := run(t, g, thread, "touch /tmp/this-sandbox", alice...); code != 0 {
		t.Fatalf("mark the sandbox: %s", out)
	}
	if code, body, _ := call(t, "PUT", g.URL+"/threads/"+thread+"/sandbox", map[string]any{"template": "python",
		"env": map[string]string{"PER_CREATE": "c1"}, "metadata": map[string]string{"agent": "a8"}}, alice...); code != 200 {
		t.Fatalf("PUT new metadata: %d %s", code, body)
	}
	if out, code := run(t, g, thread, "test -e /tmp/this-sandbox", alice...); code != 0 {
		t.Errorf("a metadata change replaced the sandbox: %s", out)
	}
	if code, body, _ := call(t, "PUT", g.URL+"/threads/"+thread+"/sandbox", map[string]any{"template": "small"}, alice...); code != 200 {
		t.Fatalf("PUT template small: %d %s", code, body)
	}
	out, code = run(t, g, thread, `test ! -e /tmp/this-sandbox && test -e `+whl+` && echo "$TEMPLATE_MARK"`, alice...)
	if code != 0 || strings.TrimSpace(out) != "small-template" {
		t.Errorf("after the template change: exit %d %q, want a new sandbox of small with the thread's files", code, out)
	}

	// Without a body a thread gets the default template.
	if out, _ := run(t, g, "tpl-default", `echo "$TEMPLATE_MARK"; test -e `+marker+` && echo image-usr`, alice...); strings.TrimSpace(out) != "small-template" {
		t.Errorf("default template: %q", out)
	}
	// An admin may set a thread's egress with its create.
	if code, body, _ := call(t, "PUT", g.URL+"/threads/tpl-admin/sandbox", map[string]any{"template": "small",
		"egress": map[string]any{"mode": "none"}}, "Authorization", "Bearer ops-key"); code != 200 {
		t.Errorf("admin create with egress: %d %s", code, body)
	}
}

// checkImageLayer: a root gateway gives each sandbox of template python a
// writable layer over the image. pip install without --user puts the
// test's wheel in the image's own site-packages, where it imports; the
// shared store on disk does not get it, another thread's sandbox does not
// see it, and after a destroy the recreated sandbox is the image again.
func checkImageLayer(t *testing.T, g *gateway, rootfs string) {
	t.Helper()
	alice := []string{"Authorization", "Bearer alice-key"}
	python := map[string]any{"template": "python"}
	for _, thread := range []string{"tpl-layer", "tpl-layer-other"} {
		if code, body, _ := call(t, "PUT", g.URL+"/threads/"+thread+"/sandbox", python, alice...); code != 200 {
			t.Fatalf("PUT template python: %d %s", code, body)
		}
	}
	const whl = "/tmp/sgprobe-1.0-py3-none-any.whl"
	install := fmt.Sprintf("echo %s | base64 -d > %s && python3 -m pip install --no-index --break-system-packages %s 2>&1",
		base64.StdEncoding.EncodeToString(probeWheel(t)), whl, whl)
	if out, code := run(t, g, "tpl-layer", install, alice...); code != 0 {
		t.Fatalf("pip install without --user: exit %d: %s", code, out)
	}
	const where = `python3 -c 'import sgprobe; print(sgprobe.MARK, sgprobe.__file__)'`
	out, code := run(t, g, "tpl-layer", where, alice...)
	if code != 0 || !strings.HasPrefix(out, "sgprobe-ok /usr/") {
		t.Fatalf("after pip install without --user: exit %d: %q, want sgprobe imported from the image's /usr", code, out)
	}
	installed := filepath.Dir(strings.TrimSpace(strings.TrimPrefix(out, "sgprobe-ok ")))
	if _, err := os.Lstat(filepath.Join(rootfs, installed)); err == nil {
		t.Errorf("the package reached the shared store: %s", installed)
	}
	if out, code := run(t, g, "tpl-layer-other", where, alice...); code == 0 {
		t.Errorf("another thread's sandbox imports the package: %q", out)
	}
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/tpl-layer/sandbox?destroy=true", nil, alice...); code/100 != 2 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	if code, body, _ := call(t, "PUT", g.URL+"/threads/tpl-layer/sandbox", python, alice...); code != 200 {
		t.Fatalf("PUT template python again: %d %s", code, body)
	}
	if out, code := run(t, g, "tpl-layer", where, alice...); code == 0 {
		t.Errorf("the recreated sandbox still has the destroyed one's install: %q", out)
	}
}
