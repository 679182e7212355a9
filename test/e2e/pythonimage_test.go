package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/imagestore"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The Python sandbox image (scripts/sandbox-image.sh) as process_image: the
// sandbox's python3, node, git and curl are the image's, and what pip
// installs into the workspace outlives the sandbox (the thread keeps it).
func TestPythonImage(t *testing.T) {
	t.Parallel()
	tag, archive := testutil.PythonImage(t)
	f := newFleet(t, "--process-image", archive)
	// The gateway imports the image at start-up, which for this one (~750 MB)
	// can outlast the harness's start deadline on a loaded machine; imported
	// into its data dir first, it finds the image stored.
	store, err := imagestore.Open(imagestore.Config{Dir: filepath.Join(f.dataDir, "images")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := store.ImportArchive(ctx, archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("image imported in %s", time.Since(start).Round(time.Millisecond))
	g := f.start()
	checkPythonImage(t, g, tag)
	// Every thread's sandbox runs this one image: a thread's pip into the
	// image's /usr lands in its own writable layer, never in the stored
	// image the other threads run.
	out, code := run(t, g, "py", "python3 -m pip install --no-index --break-system-packages --target /usr/lib/python3/dist-packages sgprobe-1.0-py3-none-any.whl && python3 -c 'import sgprobe'")
	if code != 0 {
		t.Errorf("pip into the image's /usr (the sandbox's layer): exit %d: %s", code, out)
	}
	if out, code := run(t, g, "other", "python3 -c 'import sgprobe'"); code == 0 {
		t.Errorf("another thread imports the package pip put into /usr: %s", out)
	}
	if in := storeFiles(t, filepath.Join(f.dataDir, "images"), "__init__.py"); slices.ContainsFunc(slices.Collect(maps.Keys(in)), func(p string) bool { return strings.Contains(p, "sgprobe") }) {
		t.Errorf("pip's package reached the stored image")
	}
}

// The same image on the docker backend: its server at /sandgate-sandbox
// runs it, and the thread's pip installs outlive the container.
func TestPythonImageDocker(t *testing.T) {
	t.Parallel()
	tag, _ := testutil.PythonImage(t)
	d := newDockerEnv(t)
	d.image = tag
	checkPythonImage(t, d.fleet().start(), tag)
}

// checkPythonImage runs the image's tools in a sandbox of g, installs a
// package into the workspace (pip --user, a venv, npm -g), and uses it
// again after the sandbox was destroyed and recreated; another thread does
// not see it.
func checkPythonImage(t *testing.T, g *gateway, tag string) {
	t.Helper()
	// The image names itself in this file; the host has none, so reading it
	// proves the sandbox's /usr is the image's.
	const marker = "/usr/share/sandgate/image"
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("%s exists on the host: the test could not tell the image's /usr from the host's", marker)
	}
	const thread = "py"
	for _, tc := range []struct {
		name, command, want string // want: in the output
	}{
		{"image's python", `python3 -c 'import sys; print(sys.prefix, sys.version_info[:2], open("` + marker + `").read().strip())'`, "/usr (3, 11) " + tag},
		{"pip", "python3 -m pip --version", "/usr/lib/python3/dist-packages/pip"},
		{"node", `node -e 'console.log(process.version)'`, "v18."},
		{"npm", "npm --version", ""},
		{"git", "git --version", "git version"},
		{"curl", "curl --version", "curl "},
		{"cc", "cc --version && make --version", "GNU Make"},
		{"home is the workspace", `echo "$HOME"`, "/mnt/user-data/workspace"},
	} {
		out, code := run(t, g, thread, tc.command)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q: exit %d, output %q, want %q in it", tc.name, tc.command, code, out, tc.want)
		}
	}

	// A pip --user install from a local wheel (egress is closed), a venv
	// and an npm -g install with the prefix ~/.local (/usr is read-only), all
	// in the workspace; the destroy below ends the sandbox, not the thread's
	// data.
	whl := "sgprobe-1.0-py3-none-any.whl"
	install := fmt.Sprintf("echo %s | base64 -d > %s && python3 -m pip install --user --no-index --break-system-packages %s",
		base64.StdEncoding.EncodeToString(probeWheel(t)), whl, whl)
	venv := "python3 -m venv .venv && .venv/bin/pip install --no-index " + whl + " && .venv/bin/python -c 'import sgprobe, sys; print(sys.prefix)'"
	npm := `mkdir sgnode && cd sgnode && echo '{"name":"sgnode","version":"1.0.0","bin":{"sgnode":"i.js"}}' > package.json && ` +
		`printf '#!/usr/bin/env node\nconsole.log("sgnode-ok", __filename)\n' > i.js && npm pack --offline && ` +
		`npm install -g --offline --no-audit --no-fund --prefix ~/.local ./sgnode-1.0.0.tgz`
	for _, cmd := range []string{install, venv, npm} {
		if out, code := run(t, g, thread, cmd); code != 0 {
			t.Fatalf("%q: exit %d: %s", cmd, code, out)
		}
	}
	// A file in /tmp marks this sandbox: the recreated one has a /tmp of its own.
	if out, code := run(t, g, thread, "touch /tmp/old-sandbox"); code != 0 {
		t.Fatalf("mark the sandbox: %d %s", code, out)
	}
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/"+thread+"/sandbox?destroy=true", nil); code/100 != 2 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	for _, cmd := range []string{
		"python3 -c 'import sgprobe; print(sgprobe.MARK, sgprobe.__file__)'",
		".venv/bin/python -c 'import sgprobe; print(sgprobe.MARK, sgprobe.__file__)'",
		"~/.local/bin/sgnode",
	} {
		out, code := run(t, g, thread, cmd)
		if code != 0 || !regexp.MustCompile(`sg(probe|node)-ok /mnt/user-data/workspace/`).MatchString(out) {
			t.Errorf("after the destroy, %q: exit %d: %s", cmd, code, out)
		}
	}
	if out, code := run(t, g, thread, "test ! -e /tmp/old-sandbox"); code != 0 {
		t.Errorf("the sandbox was not recreated: %s", out)
	}
	// The installs are the thread's: another thread's sandbox has none.
	for _, cmd := range []string{"python3 -c 'import sgprobe'", "command -v sgnode || test -e ~/.local/bin/sgnode"} {
		if out, code := run(t, g, "py-other", cmd); code == 0 {
			t.Errorf("another thread: %q succeeded: %s", cmd, out)
		}
	}
}

// probeWheel is a pure-Python wheel of package sgprobe: the zip pip
// installs, with the RECORD of its files' hashes.
func probeWheel(t *testing.T) []byte {
	t.Helper()
	const info = "sgprobe-1.0.dist-info/"
	files := []struct{ name, data string }{
		{"sgprobe/__init__.py", "MARK = 'sgprobe-ok'\n"},
		{info + "METADATA", "Metadata-Version: 2.1\nName: sgprobe\nVersion: 1.0\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: sandgate-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name, data string) {
		w, err := zw.Create(name)
		if err == nil {
			_, err = w.Write([]byte(data))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.data))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
		add(f.name, f.data)
	}
	add(info+"RECORD", record.String()+info+"RECORD,,\n")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
