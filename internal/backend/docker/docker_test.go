package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// Integration tests against the machine's real Docker engine.

func TestCreateServesWithSafeDefaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend(func(c *Config) { c.Memory, c.NanoCPUs, c.PidsLimit = 256<<20, 5e8, 200 })
	dataDir, skills := t.TempDir(), t.TempDir()
	// The skills dir is the operator's, shared by every sandbox uid: it
	// must be readable by others (a temp dir is 0700).
	if err := os.WriteFile(filepath.Join(skills, "SKILL.md"), []byte("skill text"), 0o644); err != nil || os.Chmod(skills, 0o755) != nil {
		t.Fatal(err)
	}
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: dataDir, SkillsDir: skills}, "alice", "t1")
	spec.Env = map[string]string{"API_KEY": "s3cret-value-42", "PLAIN": "plain-value"}
	spec.Labels = map[string]string{"team": "x"}
	info := backendtest.MustCreate(t, d, spec)

	// No network: the server answers on its socket only.
	if !strings.HasPrefix(info.URL, "unix:///") || backendtest.Status(t, info.URL, "") != 200 {
		t.Fatalf("URL %q not serving on a Unix socket", info.URL)
	}
	c := h.inspect(info.Incarnation)
	if c.Name != "/"+h.prefix+"-"+spec.SandboxID || info.Backend != Name || info.Thread != "t1" || info.User != "alice" || info.CreatedAt.IsZero() {
		t.Errorf("name %q info %+v", c.Name, info)
	}
	for k, v := range map[string]string{backend.LabelManagedBy: backend.ManagedByValue, backend.LabelSandboxID: spec.SandboxID,
		backend.LabelThread: "t1", backend.LabelUser: "alice", backend.LabelInstance: "test", "team": "x"} {
		if c.Config.Labels[k] != v || info.Labels[k] != v {
			t.Errorf("label %s = %q / %q, want %q", k, c.Config.Labels[k], info.Labels[k], v)
		}
	}
	hc := c.HostConfig
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") ||
		slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.Contains(s, "unconfined") }) {
		t.Errorf("security: cap drop %q opts %q", hc.CapDrop, hc.SecurityOpt)
	}
	if hc.Memory != 256<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 200 || hc.Init == nil || !*hc.Init {
		t.Errorf("limits memory %d cpus %d pids %v init %v", hc.Memory, hc.NanoCPUs, hc.PidsLimit, hc.Init)
	}
	if hc.NetworkMode != "none" || len(c.NetworkSettings.Ports) != 0 || len(hc.PortBindings) != 0 {
		t.Errorf("network %q ports %v %v, want none", hc.NetworkMode, c.NetworkSettings.Ports, hc.PortBindings)
	}
	own := resolveUser("", spec.SandboxID, os.Geteuid(), os.Getegid())
	if c.Config.User != own.user || own.uid == os.Geteuid() {
		t.Errorf("user %q, want the sandbox's own %s (never the gateway's uid %d)", c.Config.User, own.user, os.Geteuid())
	}
	var skillsRO bool
	for _, m := range c.Mounts {
		if m.Destination == backend.VirtualSkills {
			skillsRO = m.Type == mount.TypeBind && !m.RW
		}
	}
	if !skillsRO {
		t.Errorf("skills not a read-only bind: %+v", c.Mounts)
	}

	// The sandbox API works on the bind mounts; the env reaches shells.
	out := backendtest.Exec(t, info, "echo hi > notes.txt && pwd && id -u && echo key=$API_KEY plain=$PLAIN && grep CapEff /proc/self/status && cat /mnt/skills/SKILL.md")
	for _, want := range []string{backend.VirtualWorkspace, "\n" + strconv.Itoa(own.uid) + "\n", "key=s3cret-value-42", "plain=plain-value",
		"CapEff:\t0000000000000000", "skill text"} {
		if !strings.Contains(out.Output, want) {
			t.Errorf("exec output lacks %q:\n%s", want, out.Output)
		}
	}
	data, err := os.ReadFile(filepath.Join(backend.ThreadDir(dataDir, "alice", "t1"), "workspace", "notes.txt"))
	if err != nil || string(data) != "hi\n" {
		t.Errorf("file on host: %q %v", data, err)
	}
	ro := backendtest.Exec(t, info, "echo x > /mnt/skills/new.txt")
	if ro.ExitCode == 0 || !strings.Contains(strings.ToLower(ro.Output), "read-only") {
		t.Errorf("write to skills: exit %d %q", ro.ExitCode, ro.Output)
	}
	if strings.Contains(h.logs.String(), "s3cret-value-42") {
		t.Error("an environment value reached the log")
	}
}

func TestPauseResumeDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend()
	ctx := backendtest.Ctx(t)
	info := backendtest.MustCreate(t, d, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "carol", "p"))

	for range 2 { // idempotent
		if err := d.Freeze(ctx, info); err != nil {
			t.Fatalf("Pause: %v", err)
		}
	}
	if !h.inspect(info.Incarnation).State.Paused {
		t.Fatal("not paused")
	}
	if ok, err := d.Alive(ctx, info); !ok || err != nil {
		t.Fatalf("paused sandbox Alive = %v, %v; want alive", ok, err)
	}
	for range 2 {
		if err := d.Thaw(ctx, info); err != nil {
			t.Fatalf("Resume: %v", err)
		}
	}
	if h.inspect(info.Incarnation).State.Paused || backendtest.Status(t, info.URL, "") != 200 {
		t.Fatal("resumed sandbox not serving")
	}

	// Destroy takes a paused container too.
	if err := d.Freeze(ctx, info); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := d.Destroy(ctx, info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("Destroy took %v: the server should stop on SIGTERM, not wait for the kill", took)
	}
	if _, err := h.api.ContainerInspect(ctx, info.Incarnation); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container still there: %v", err)
	}
	if ok, err := d.Alive(ctx, info); ok || err != nil {
		t.Fatalf("destroyed sandbox Alive = %v, %v", ok, err)
	}
}

func TestDiscoverAndListSeeOnlyTheirPrefix(t *testing.T) {
	t.Parallel()
	h, other := newHarness(t), newHarness(t)
	d, od := h.backend(), other.backend()
	ctx := backendtest.Ctx(t)
	mc := backend.MountConfig{DataDir: t.TempDir()}
	mine := backendtest.MustCreate(t, d, backendtest.Spec(t, mc, "dave", "mine"))
	theirs := backendtest.MustCreate(t, od, backendtest.Spec(t, mc, "dave", "theirs"))

	got, ok, err := h.backend().Discover(ctx, mine.SandboxID)
	if err != nil || !ok || got.Incarnation != mine.Incarnation || got.URL != mine.URL || got.Thread != "mine" {
		t.Fatalf("Discover = %+v %v %v", got, ok, err)
	}
	if _, ok, err := d.Discover(ctx, theirs.SandboxID); ok || err != nil {
		t.Fatalf("Discover of another prefix's sandbox = %v %v", ok, err)
	}
	if err := d.Freeze(ctx, mine); err != nil {
		t.Fatal(err)
	}
	list, err := d.List(ctx)
	if err != nil || len(list) != 1 || list[0].Incarnation != mine.Incarnation || list[0].URL != mine.URL ||
		list[0].User != "dave" || list[0].Thread != "mine" || list[0].CreatedAt.IsZero() {
		t.Fatalf("List = %+v %v; want only the paused own sandbox", list, err)
	}
	// Discover hands a paused sandbox out thawed.
	got, ok, err = d.Discover(ctx, mine.SandboxID)
	if err != nil || !ok || h.inspect(mine.Incarnation).State.Paused {
		t.Fatalf("Discover of a paused sandbox: %v %v, paused=%v", ok, err, h.inspect(mine.Incarnation).State.Paused)
	}
	if got.URL != mine.URL || backendtest.Status(t, got.URL, "") != 200 {
		t.Fatalf("discovered sandbox not serving")
	}
}

func TestDeadContainersAreReplaced(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend()
	ctx := backendtest.Ctx(t)
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "erin", "dead")
	first := backendtest.MustCreate(t, d, spec)

	// Stopped behind the backend's back: not alive, not discovered, replaced.
	timeout := 0
	if err := h.api.ContainerStop(ctx, first.Incarnation, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.Alive(ctx, first); ok || err != nil {
		t.Fatalf("stopped Alive = %v %v", ok, err)
	}
	if _, ok, err := d.Discover(ctx, spec.SandboxID); ok || err != nil {
		t.Fatalf("stopped Discover = %v %v", ok, err)
	}
	second := backendtest.MustCreate(t, d, spec)
	if second.Incarnation == first.Incarnation || backendtest.Status(t, second.URL, "") != 200 {
		t.Fatalf("not replaced: %s", second.Incarnation)
	}
	if _, err := h.api.ContainerInspect(ctx, first.Incarnation); !cerrdefs.IsNotFound(err) {
		t.Errorf("stopped container left behind: %v", err)
	}
	// Destroy of the old incarnation leaves the new one alone.
	if err := d.Destroy(ctx, first); err != nil {
		t.Fatal(err)
	}
	if ok, _ := d.Alive(ctx, second); !ok {
		t.Fatal("Destroy of the old incarnation killed the new one")
	}

	// Removed behind its back: not alive, then created anew.
	if err := h.api.ContainerRemove(ctx, second.Incarnation, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.Alive(ctx, second); ok || err != nil {
		t.Fatalf("removed Alive = %v %v", ok, err)
	}
	third := backendtest.MustCreate(t, d, spec)
	if third.Incarnation == second.Incarnation || len(h.containers()) != 1 {
		t.Fatalf("after removal: %s, %d containers", third.Incarnation, len(h.containers()))
	}
}

func TestForeignContainerIsLeftAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend()
	ctx := backendtest.Ctx(t)
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "frank", "foreign")
	name := h.prefix + "-" + spec.SandboxID
	// Someone else's container under the sandbox's name: same labels but
	// managed-by, so the harness still cleans it up.
	resp, err := h.api.ContainerCreate(ctx, &container.Config{Image: h.image, Entrypoint: []string{"/bin/sleep"}, Cmd: []string{"300"},
		Labels: map[string]string{backend.LabelManagedBy: "someone-else"}}, nil, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.api.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true}) })
	if err := h.api.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(ctx, spec); err == nil || !strings.Contains(err.Error(), "did not make") {
		t.Errorf("Create over a foreign container: %v", err)
	}
	if _, ok, err := d.Discover(ctx, spec.SandboxID); ok || err != nil {
		t.Errorf("Discover of a foreign container: %v %v", ok, err)
	}
	if err := d.Destroy(ctx, backend.Info{SandboxID: spec.SandboxID}); err == nil {
		t.Error("Destroy accepted a foreign container")
	}
	if ok, _ := d.Alive(ctx, backend.Info{SandboxID: spec.SandboxID, Incarnation: resp.ID}); ok {
		t.Error("a foreign container counted as the sandbox")
	}
	if !h.inspect(resp.ID).State.Running {
		t.Fatal("the foreign container was touched")
	}
}

func TestMissingImageIsNamed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "gina", "img")
	cases := []struct{ image, policy, want string }{
		{"sandgate-test-missing:nope", PullNever, "docker_pull_policy is never"},
		// A registry that refuses at once: the pull fails fast, without network.
		{"127.0.0.1:1/sandgate/missing:nope", PullIfNotPresent, "could not be pulled"},
		{"127.0.0.1:1/sandgate/missing:nope", PullAlways, "could not be pulled"},
	}
	for _, c := range cases {
		d := h.backend(func(cfg *Config) { cfg.Image, cfg.PullPolicy = c.image, c.policy })
		_, err := d.Create(backendtest.Ctx(t), spec)
		if err == nil || !strings.Contains(err.Error(), c.image) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %s: %v", c.image, c.policy, err)
		}
		var img *backend.ImageError
		if !errors.As(err, &img) || img.Image != c.image {
			t.Errorf("%s with %s: not an ImageError naming it: %v", c.image, c.policy, err)
		}
		// /readyz: the engine answers but the image is missing.
		if err := d.Ping(backendtest.Ctx(t)); !errors.As(err, &img) || img.Image != c.image {
			t.Errorf("%s: Ping = %v, want an ImageError naming it", c.image, err)
		}
	}
	if err := h.backend().Ping(backendtest.Ctx(t)); err != nil {
		t.Errorf("Ping with the image present: %v", err)
	}
	if !strings.Contains(h.logs.String(), "pulling image") {
		t.Errorf("pull not logged:\n%s", h.logs)
	}
	if n := len(h.containers()); n != 0 {
		t.Errorf("%d containers left", n)
	}
}

// An image without the server label runs its own entrypoint; one that exits
// fails the create at once, with its log, instead of after ReadyTimeout.
func TestExitBeforeReadyFailsFast(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tag := buildDerived(t, h, `LABEL io.sandgate.sandbox-server=""
ENTRYPOINT ["/bin/sh", "-c", "echo boom-before-ready >&2; exit 3"]`)
	d := h.backend(func(c *Config) { c.Image, c.ReadyTimeout = tag, 45*time.Second })
	began := time.Now()
	_, err := d.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "hank", "boom"))
	if err == nil || !strings.Contains(err.Error(), "status 3") || !strings.Contains(err.Error(), "boom-before-ready") {
		t.Fatalf("Create: %v", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("failure took %v", took)
	}
	if n := len(h.containers()); n != 0 {
		t.Errorf("%d failed containers left", n)
	}
}

// An image built before the lean server binary labels the gateway binary
// (/gateway): the label names the server, whichever binary it is, and the
// backend runs `<label> sandbox ...` for it as for /sandgate-sandbox.
func TestServerLabelNamingTheGatewayBinary(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// The lean binary serves the same subcommand: copied to /gateway, it
	// stands in for an old image's gateway binary.
	tag := buildDerived(t, h, `RUN ["/bin/busybox", "cp", "`+sandboxspec.ServerImagePath+`", "/gateway"]
RUN ["/bin/busybox", "rm", "`+sandboxspec.ServerImagePath+`"]
LABEL io.sandgate.sandbox-server="/gateway"`)
	d := h.backend(func(c *Config) { c.Image = tag })
	info := backendtest.MustCreate(t, d, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "ivy", "old-image"))
	if !strings.HasPrefix(info.URL, "unix:///") || backendtest.Status(t, info.URL, info.Secret) != 200 {
		t.Fatalf("URL %q not serving on a Unix socket", info.URL)
	}
	if c := h.inspect(info.Incarnation); !slices.Equal(c.Config.Entrypoint, []string{"/gateway"}) || c.Config.Cmd[0] != sandboxspec.ServerCommand {
		t.Errorf("command %q %q, want /gateway %s ...", c.Config.Entrypoint, c.Config.Cmd, sandboxspec.ServerCommand)
	}
}

// buildDerived builds FROM the sandbox image plus lines (testutil.DerivedImage).
func buildDerived(t *testing.T, h *harness, lines string) string {
	t.Helper()
	return testutil.DerivedImage(t, h.image, lines)
}

// docker_disk_limit on the real engine: a storage driver that takes a size
// gives the container that writable-layer limit; one that does not (this
// machine's fuse-overlayfs) fails the create with an error naming the
// setting, and leaves no container behind.
func TestDiskLimitOnTheEngine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend(func(c *Config) { c.DiskLimit = 1 << 30 })
	spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "alice", "disk")
	info, err := d.Create(backendtest.Ctx(t), spec)
	if err != nil {
		if !strings.Contains(err.Error(), "docker_disk_limit") || !strings.Contains(err.Error(), "storage driver") {
			t.Fatalf("create with a disk limit the engine refused: %v, want an error naming docker_disk_limit", err)
		}
		if left := h.containers(); len(left) != 0 {
			t.Fatalf("refused create left %d containers", len(left))
		}
		return
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), info) })
	if got := h.inspect(info.Incarnation).HostConfig.StorageOpt["size"]; got != "1073741824" {
		t.Fatalf("storage opt size %q, want 1073741824", got)
	}
}

// TestLayerBytes: what a sandbox writes outside its mounts is in its
// container's writable layer, which LayerBytes measures through the
// engine; a container that is gone has none.
func TestLayerBytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	d := h.backend()
	ctx := backendtest.Ctx(t)
	info := backendtest.MustCreate(t, d, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "erin", "layer"))
	before, ok, err := d.LayerBytes(ctx, info)
	if err != nil || !ok {
		t.Fatalf("LayerBytes = %d, %v, %v", before, ok, err)
	}
	if res := backendtest.Exec(t, info, "head -c 6291456 /dev/urandom > /tmp/blob && sync"); res.ExitCode != 0 {
		t.Fatalf("write: exit %d: %s", res.ExitCode, res.Output)
	}
	after, ok, err := d.LayerBytes(ctx, info)
	if err != nil || !ok || after-before < 6<<20 || after-before > 8<<20 {
		t.Fatalf("LayerBytes %d -> %d (%v, %v) after writing 6 MiB outside the mounts", before, after, ok, err)
	}
	if err := d.Destroy(ctx, info); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.LayerBytes(ctx, info); err == nil {
		t.Error("LayerBytes of a destroyed sandbox: no error")
	}
}
