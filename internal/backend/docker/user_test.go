package docker

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestResolveUser: by default every sandbox has a uid of its own, never
// the gateway's, root or not; explicit users are kept.
func TestResolveUser(t *testing.T) {
	t.Parallel()
	const sid = "0123456789abcdef"
	id := jail.SandboxHostID(sid)
	if id < 1<<30 || id == jail.SandboxHostID("fedcba9876543210") {
		t.Fatalf("sandbox host ids: %d, collision with another id", id)
	}
	cases := []struct {
		name       string
		cfgUser    string
		euid, egid int
		want       sandboxUser
	}{
		{"default, root gateway: own uid and gid, dirs handed over 0700", "", 0, 0,
			sandboxUser{user: ids(id, id), uid: id, gid: id, known: true, own: true, dirMode: 0o700}},
		{"default, unprivileged gateway: own uid, the gateway's group, 2770, umask 007", "", 1000, 1001,
			sandboxUser{user: ids(id, 1001), uid: id, gid: 1001, known: true, dirMode: os.ModeSetgid | 0o770, umask: "007"}},
		{"image's USER", UserImage, 0, 0, sandboxUser{}},
		{"numeric, root gateway: dirs handed over", "1000:1000", 0, 0,
			sandboxUser{user: "1000:1000", uid: 1000, gid: 1000, known: true, own: true, dirMode: 0o700}},
		{"numeric, unprivileged gateway: dirs left", "1000:1000", 1000, 1000,
			sandboxUser{user: "1000:1000", uid: 1000, gid: 1000, known: true}},
		{"uid alone: group unknown, dirs left", "1000", 0, 0, sandboxUser{user: "1000", uid: 1000, known: true}},
		{"name", "sandbox", 0, 0, sandboxUser{user: "sandbox"}},
	}
	for _, c := range cases {
		if got := resolveUser(c.cfgUser, sid, c.euid, c.egid); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestPrepareDirs: the thread's writable dirs become the sandbox user's
// (or its group's); skills and configured mounts keep owner and mode.
func TestPrepareDirs(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (to chown to a sandbox's uid)")
	const sid = "0123456789abcdef"
	id := jail.SandboxHostID(sid)
	cases := []struct {
		name     string
		user     sandboxUser
		uid, gid int
		mode     os.FileMode
	}{
		{"root gateway: all the thread's files handed over", resolveUser("", sid, 0, 0), id, id, 0o700},
		{"unprivileged gateway: group and mode only", resolveUser("", sid, 4242, 4343), 0, 4343, os.ModeSetgid | 0o770},
		{"image's USER: nothing", resolveUser(UserImage, sid, 0, 0), 0, 0, 0o700},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			extra := backend.Mount{HostPath: filepath.Join(root, "shared"), ContainerPath: "/mnt/shared"}
			mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: root, SkillsDir: filepath.Join(root, "skills"),
				Extra: []backend.Mount{extra}}, "alice", "t1")
			if err != nil || os.Mkdir(extra.HostPath, 0o755) != nil || backend.EnsureHostDirs(mounts) != nil {
				t.Fatalf("set up: %v", err)
			}
			old := filepath.Join(mounts[0].HostPath, "old.txt")
			if err := os.WriteFile(old, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := c.user.prepareDirs(mounts); err != nil {
				t.Fatal(err)
			}
			for _, m := range mounts {
				st := testutil.Stat(t, m.HostPath)
				mode := os.FileMode(st.Mode & 0o7777)
				if st.Mode&syscall.S_ISGID != 0 {
					mode = mode&^0o2000 | os.ModeSetgid
				}
				if backend.SandboxOwned(m) {
					if int(st.Uid) != c.uid || int(st.Gid) != c.gid || mode != c.mode {
						t.Errorf("%s: %d:%d %v, want %d:%d %v", m.ContainerPath, st.Uid, st.Gid, mode, c.uid, c.gid, c.mode)
					}
				} else if st.Uid != 0 || mode != 0o755 {
					t.Errorf("%s (not the thread's): %d %v, want root's 0755 kept", m.ContainerPath, st.Uid, mode)
				}
			}
			if st := testutil.Stat(t, old); int(st.Uid) != c.uid {
				t.Errorf("file already in the workspace: owner %d, want %d", st.Uid, c.uid)
			}
		})
	}
}

// A failed hand-over is the host's fault (ErrHostDirs, 507).
func TestPrepareDirsFailure(t *testing.T) {
	t.Parallel()
	missing := []backend.Mount{{HostPath: filepath.Join(t.TempDir(), "gone"), ContainerPath: backend.VirtualWorkspace}}
	for _, u := range []sandboxUser{resolveUser("", "x", 0, 0), resolveUser("", "x", 1000, 1000)} {
		if err := u.prepareDirs(missing); !errors.Is(err, backend.ErrHostDirs) || !strings.Contains(err.Error(), backend.VirtualWorkspace) {
			t.Errorf("%+v: %v, want ErrHostDirs naming the mount", u, err)
		}
	}
}

// TestUserInSpec: the container's User, the server's umask flag and the
// root warning follow the configured user.
func TestUserInSpec(t *testing.T) {
	t.Parallel()
	spec := backend.Spec{SandboxID: "0123456789abcdef", User: "alice", Thread: "t1"}
	id := jail.SandboxHostID(spec.SandboxID)
	wantDefault, wantUmask := ids(id, id), false
	if os.Geteuid() != 0 {
		wantDefault, wantUmask = ids(id, os.Getegid()), true
	}
	cases := []struct {
		cfgUser   string
		want      string
		umask     bool
		rootWarns bool
	}{
		{"", wantDefault, wantUmask, false},
		{"1000:1000", "1000:1000", false, false},
		{"0:0", "0:0", false, true},
		{"root", "root", false, true},
		{"rooted", "rooted", false, false},
	}
	for _, c := range cases {
		cs, logs := specFor(t, Config{Image: "img:1", ContainerPrefix: "sbx", User: c.cfgUser}, spec, "/gateway")
		gotUmask := slices.Contains(cs.Config.Cmd, "--umask")
		warned := strings.Contains(logs, "level=WARN") && strings.Contains(logs, "root")
		if cs.Config.User != c.want || gotUmask != c.umask || warned != c.rootWarns || cs.User.user != c.want {
			t.Errorf("docker_user %q: user %q cmd %q root warning %v, want user %q umask flag %v warning %v",
				c.cfgUser, cs.Config.User, cs.Config.Cmd, warned, c.want, c.umask, c.rootWarns)
		}
		if c.cfgUser == "" && (cs.Config.User == "0:0" || strings.HasPrefix(cs.Config.User, strconv.Itoa(os.Geteuid())+":")) {
			t.Errorf("default user %q is the gateway's", cs.Config.User)
		}
	}
}
