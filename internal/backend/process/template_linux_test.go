package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/imagestore"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/testutil"
)

// importedSandboxImage is the small sandbox image (FROM scratch, static
// busybox) imported into a store of the test's: an image's rootfs and env
// as the gateway hands a template's to the backend.
func importedSandboxImage(t *testing.T) imagestore.Image {
	t.Helper()
	store, err := imagestore.Open(imagestore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return importSandboxImage(t, store)
}

// importSandboxImage imports the small sandbox image into store.
func importSandboxImage(t *testing.T, store *imagestore.Store) imagestore.Image {
	t.Helper()
	archive := testutil.SaveImage(t, testutil.SandboxImage(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	img, err := store.ImportArchive(ctx, archive)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// One backend, two sandboxes: the one made from a template runs the
// template's image root and env, the other the host's, as configured. The
// template's name labels it, in Create's answer, List and a restarted
// backend's Discover.
func TestTemplateRootFS(t *testing.T) {
	t.Parallel()
	img := importedSandboxImage(t)
	const hostOnly = "/usr/bin/perl" // the image has no /usr at all
	testutil.Require(t, fileExists(hostOnly), hostOnly+" on the host")
	stateDir := t.TempDir()
	p := newProcess(t, stateDir)
	mc := backend.MountConfig{DataDir: t.TempDir()}
	templated := backendtest.Spec(t, mc, "tia", "image")
	templated.Template = backend.Template{Name: "busybox", RootFS: img.RootFS, RootEnv: img.Env}
	plain := backendtest.Spec(t, mc, "tia", "host")

	// busybox --install -s makes /bin/ls a link to /bin/busybox; the host's
	// /bin/ls is a program of its own.
	const probe = `echo "ls=$(readlink /bin/ls)"; echo "PATH=$PATH"; test -e ` + hostOnly + ` && echo host-perl; echo done`
	for _, tc := range []struct {
		spec       backend.Spec
		want, not  []string
		wantLabels string
	}{
		{templated, []string{"ls=/bin/busybox\n", "PATH=/usr/local/bin:/usr/bin:/bin\n", "done\n"}, []string{"host-perl"}, "busybox"},
		{plain, []string{"ls=\n", "PATH=" + sandboxPath + "\n", "host-perl\n", "done\n"}, []string{"busybox"}, ""},
	} {
		info := backendtest.MustCreate(t, p, tc.spec)
		out := backendtest.Exec(t, info, probe).Output
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("sandbox %s (template %q): want %q in\n%s", tc.spec.Thread, tc.spec.Template.Name, w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("sandbox %s (template %q): %q in\n%s", tc.spec.Thread, tc.spec.Template.Name, n, out)
			}
		}
		if got := info.Labels[backend.LabelTemplate]; got != tc.wantLabels {
			t.Errorf("sandbox %s: label %s = %q, want %q", tc.spec.Thread, backend.LabelTemplate, got, tc.wantLabels)
		}
	}

	infos, err := p.List(backendtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]string{}
	for _, info := range infos {
		templates[info.Thread] = info.Labels[backend.LabelTemplate]
	}
	if templates["image"] != "busybox" || templates["host"] != "" || len(templates) != 2 {
		t.Errorf("List: templates by thread %v, want image: busybox, host: none", templates)
	}
	restarted := newProcess(t, stateDir)
	info, ok, err := restarted.Discover(backendtest.Ctx(t), templated.SandboxID)
	if err != nil || !ok || info.Labels[backend.LabelTemplate] != "busybox" {
		t.Fatalf("Discover after restart = %v, %v, labels %v; want the busybox sandbox", ok, err, info.Labels)
	}
	// What it runs is still the image's: nothing was restarted from the
	// backend's configuration.
	if out := backendtest.Exec(t, info, "readlink /bin/ls").Output; strings.TrimSpace(out) != "/bin/busybox" {
		t.Errorf("rediscovered sandbox: readlink /bin/ls = %q, want /bin/busybox", out)
	}
}

// Only a jail can show a template's root: without isolation, Create
// refuses it and starts nothing; a template without a root still runs.
func TestTemplateRootFSNeedsIsolation(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := newProcessWith(t, Config{Binary: testutil.GatewayBinary(t), StateDir: stateDir, Isolation: IsolationNone})
	mc := backend.MountConfig{DataDir: t.TempDir()}
	spec := backendtest.Spec(t, mc, "nia", "rooted")
	spec.Template = backend.Template{Name: "py", RootFS: t.TempDir()}
	_, err := p.Create(backendtest.Ctx(t), spec)
	if err == nil || !strings.Contains(err.Error(), `template "py"`) || !strings.Contains(err.Error(), "process_isolation: namespaces") {
		t.Fatalf("Create with a rootfs under process_isolation none = %v, want a refusal naming the template and the isolation", err)
	}
	if files := sandboxFiles(t, stateDir); len(files) != 0 {
		t.Errorf("a refused create left %v", files)
	}
	named := backendtest.Spec(t, mc, "nia", "named")
	named.Template = backend.Template{Name: "plain"}
	if info := backendtest.MustCreate(t, p, named); info.Labels[backend.LabelTemplate] != "plain" {
		t.Errorf("labels %v, want template plain", info.Labels)
	}
}

// What a jail cannot run is refused before anything starts, naming the
// template and never its host path.
func TestValidTemplate(t *testing.T) {
	t.Parallel()
	isolated, plain := &Process{cgroups: &jail.Cgroups{}}, &Process{}
	for _, tc := range []struct {
		name string
		p    *Process
		t    backend.Template
		want string // in the error; "" = valid
	}{
		{"zero", plain, backend.Template{}, ""},
		{"memory only, unisolated", plain, backend.Template{Name: "m", Memory: 1 << 30}, ""},
		{"image root", isolated, backend.Template{Name: "py", RootFS: "/data/images/abc", RootEnv: []string{"PATH=/usr/bin"}}, ""},
		{"root unisolated", plain, backend.Template{Name: "py", RootFS: "/data/images/abc"}, `template "py": an image root (rootfs) needs process_isolation: namespaces`},
		{"relative root", isolated, backend.Template{Name: "rel", RootFS: "images/abc"}, `template "rel": rootfs is not an absolute path`},
		{"bad env", isolated, backend.Template{Name: "env", RootFS: "/data/images/abc", RootEnv: []string{"PATH=/bin", "NOVALUE"}}, `template "env": image environment entry 1 is not KEY=VALUE`},
		{"NUL in env", isolated, backend.Template{Name: "nul", RootFS: "/data/images/abc", RootEnv: []string{"A=b\x00c"}}, "entry 0 is not KEY=VALUE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.p.validTemplate(tc.t)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validTemplate = %v, want %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "/data/images") {
				t.Errorf("error %q shows the host path", err)
			}
		})
	}
}

// A template's memory replaces the backend's limit for its sandbox only:
// its cgroup holds the template's, a hog past it is OOM-killed (the
// sandbox lives on), and the plain sandbox beside it keeps the backend's.
func TestTemplateMemory(t *testing.T) {
	t.Parallel()
	const configured, templated = 512 << 20, 64 << 20
	cfg := Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), Instance: "test"}
	cfg.Limits.Memory = configured
	p := newProcessWith(t, cfg)
	testutil.Require(t, p.cgroups.Mode() != jail.CgroupNone, "a memory cgroup the gateway may create")
	mc := backend.MountConfig{DataDir: t.TempDir()}
	small := backendtest.Spec(t, mc, "mo", "small")
	small.Template = backend.Template{Name: "small", Memory: templated}
	for _, tc := range []struct {
		spec backend.Spec
		want int64
	}{
		{small, templated},
		{backendtest.Spec(t, mc, "mo", "default"), configured},
	} {
		info := backendtest.MustCreate(t, p, tc.spec)
		mem := memoryCgroupOf(t, pidOf(t, info))
		if got := mem.limit(t); got != tc.want {
			t.Errorf("sandbox %s: cgroup memory limit %d, want %d", tc.spec.Thread, got, tc.want)
		}
		if tc.want != templated {
			continue
		}
		// 128 MiB in a shell variable: twice the template's limit.
		res := backendtest.Exec(t, info, `x=$(head -c 134217728 /dev/zero | tr '\0' a); echo "held ${#x}"`)
		t.Logf("hog: exit %d, output %q, oom kills %d", res.ExitCode, res.Output, mem.oomKills(t))
		if strings.Contains(res.Output, "held 134217728") || mem.oomKills(t) == 0 {
			t.Errorf("a 128 MiB hog under a %d-byte template limit: output %q, %d OOM kills", templated, res.Output, mem.oomKills(t))
		}
		if out := backendtest.Exec(t, info, "echo alive").Output; strings.TrimSpace(out) != "alive" {
			t.Errorf("sandbox after the hog: %q, want alive", out)
		}
	}
}

// memoryCgroup is a sandbox's memory cgroup as the host sees it.
type memoryCgroup struct {
	dir string
	v2  bool
}

// memoryCgroupOf finds pid's memory cgroup (v2 unified, or v1 memory).
func memoryCgroupOf(t *testing.T, pid int) memoryCgroup {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v2 := fileExists("/sys/fs/cgroup/cgroup.controllers")
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(parts) != 3:
		case v2 && parts[0] == "0":
			return memoryCgroup{filepath.Join("/sys/fs/cgroup", parts[2]), true}
		case !v2 && strings.Contains(","+parts[1]+",", ",memory,"):
			return memoryCgroup{filepath.Join("/sys/fs/cgroup/memory", parts[2]), false}
		}
	}
	t.Fatalf("pid %d is in no memory cgroup:\n%s", pid, data)
	return memoryCgroup{}
}

func (m memoryCgroup) read(t *testing.T, v2, v1 string) string {
	t.Helper()
	file := filepath.Join(m.dir, v1)
	if m.v2 {
		file = filepath.Join(m.dir, v2)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// limit is the cgroup's memory limit in bytes.
func (m memoryCgroup) limit(t *testing.T) int64 {
	t.Helper()
	v := strings.TrimSpace(m.read(t, "memory.max", "memory.limit_in_bytes"))
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("memory limit %q: %v", v, err)
	}
	return n
}

// oomKills is the cgroup's count of OOM kills.
func (m memoryCgroup) oomKills(t *testing.T) int {
	t.Helper()
	for line := range strings.Lines(m.read(t, "memory.events", "memory.oom_control")) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatal("the memory cgroup counts no oom_kill")
	return 0
}
