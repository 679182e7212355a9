package e2e

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestDockerSandboxUser (issue 18): a docker sandbox never runs as the
// gateway's uid; the thread's dirs and what the sandbox writes are its own
// (0700, no bit for others), so another host user reads nothing; and a
// setuid binary it plants in the workspace gives a host user nothing: it is
// out of reach, and even reached it runs as the sandbox's unprivileged uid.
func TestDockerSandboxUser(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Getuid() == 0, "root (to run commands as the unprivileged user nobody)")
	idBin, err := os.ReadFile("/usr/bin/id")
	testutil.Require(t, err == nil, "/usr/bin/id")
	d := newDockerEnv(t)
	f := d.fleet()
	g := f.start()
	const thread, secret = "suid-d", "thread-secret-5150"

	// Inside: not root, not the gateway; the container's configured user.
	out := shell(t, g.URL, thread, "id -u; id -g; echo "+secret+" > secret.txt; mkdir sub")
	ids := strings.Fields(out.Output)
	if len(ids) != 2 || out.ExitCode == nil || *out.ExitCode != 0 {
		t.Fatalf("id in the sandbox: %+v", out)
	}
	uid, _ := strconv.Atoi(ids[0])
	if uid == 0 || uid == os.Geteuid() {
		t.Fatalf("the sandbox runs as uid %d: root or the gateway's", uid)
	}
	if user := d.containerOf(g.URL, thread).Config.User; user != ids[0]+":"+ids[1] {
		t.Fatalf("container user %q, sandbox's id %s:%s", user, ids[0], ids[1])
	}

	// On the host: the thread's dirs are the sandbox uid's, 0700; what it
	// wrote (shell and file API) is its own with nothing for group or others.
	threadDir := backend.ThreadDir(f.dataDir, "default", thread)
	ws := filepath.Join(threadDir, "workspace")
	for _, sub := range []string{"workspace", "uploads", "outputs"} {
		if st := testutil.Stat(t, filepath.Join(threadDir, sub)); int(st.Uid) != uid || st.Mode&0o7777 != 0o700 {
			t.Errorf("%s on the host: uid %d mode %o, want the sandbox's %d, 0700", sub, st.Uid, st.Mode&0o7777, uid)
		}
	}
	writeFileAPI(t, g.URL, thread, "/mnt/user-data/workspace/api.txt", []byte(secret))
	for _, name := range []string{"secret.txt", "sub", "api.txt"} {
		if st := testutil.Stat(t, filepath.Join(ws, name)); int(st.Uid) != uid || st.Mode&0o077 != 0 {
			t.Errorf("%s written by the sandbox: uid %d mode %o, want the sandbox's %d and nothing for others", name, st.Uid, st.Mode&0o7777, uid)
		}
	}

	// Another host user reads nothing of the thread.
	for _, argv := range [][]string{{"cat", filepath.Join(ws, "secret.txt")}, {"ls", ws}} {
		if got, ok := asNobody(t, argv...); ok || strings.Contains(got, secret) || !strings.Contains(got, "Permission denied") {
			t.Errorf("nobody ran %q: ok=%v %q, want permission denied", argv, ok, got)
		}
	}

	// A setuid binary planted in the workspace: a host binary that prints
	// its effective uid, written through the file API, made setuid inside.
	writeFileAPI(t, g.URL, thread, "/mnt/user-data/workspace/rootid", idBin)
	if out := shell(t, g.URL, thread, "chmod 4755 rootid && stat -c '%a %u' rootid"); strings.TrimSpace(out.Output) != "4755 "+ids[0] {
		t.Fatalf("chmod u+s inside: %+v", out)
	}
	planted := filepath.Join(ws, "rootid")
	// Run by nobody on the host: out of reach (the workspace is 0700).
	if got, ok := asNobody(t, "sh", "-c", planted+" -u"); ok || !strings.Contains(got, "Permission denied") {
		t.Fatalf("nobody ran the planted setuid binary: ok=%v %q, want permission denied", ok, got)
	}
	// Even reached (the same inode linked where nobody can go), it runs as
	// the sandbox's uid, its owner: never root, never the gateway's user.
	open, err := os.MkdirTemp("", "sandgate-suid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(open) })
	linked := filepath.Join(open, "rootid")
	if err := errors.Join(os.Chmod(open, 0o755), os.Link(planted, linked)); err != nil {
		t.Fatal(err)
	}
	if euid, ok := asNobody(t, linked, "-u"); !ok || strings.TrimSpace(euid) != ids[0] {
		t.Fatalf("planted setuid binary run by nobody: euid %q (ok=%v), want the sandbox's %s", euid, ok, ids[0])
	}
}

// writeFileAPI writes data through the sandbox's file API (base64).
func writeFileAPI(t *testing.T, base, thread, file string, data []byte) {
	t.Helper()
	code, body, _ := call(t, "POST", base+"/threads/"+thread+"/v1/file/write",
		map[string]any{"file": file, "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"})
	if code != 200 {
		t.Fatalf("write %s: %d %s", file, code, body)
	}
}
