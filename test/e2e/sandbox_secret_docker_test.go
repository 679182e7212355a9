package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// secretLabel is where the docker backend keeps a sandbox's secret for
// Discover and List; only engine users (root-equivalent) can read it, as
// this test does.
const secretLabel = "sandgate.secret"

// TestSandboxSecretDockerBackend attacks docker-backend sandbox servers as
// issue 15 did: from the host on the server's Unix socket and as a local
// unprivileged user, with no key, the shared key and the other sandbox's
// secret: every call is 401 (or, for the local user, the socket cannot be
// reached), while the gateway's requests succeed and the own secret opens
// the server. From another sandbox there is no way at all (issue 18: no
// network, only its own socket dir). The secret file is gone before any command
// runs, the secret is in no environment or command line, the server's
// /proc entries are closed to the commands, and a gateway that lost Redis
// still reaches the sandbox.
func TestSandboxSecretDockerBackend(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Getuid() == 0, "root (to run commands as the unprivileged user nobody)")
	_, err := exec.LookPath("curl")
	testutil.Require(t, err == nil, "curl")
	d := newDockerEnv(t)
	f := d.fleet("--sandbox-api-key", sharedKey)
	g := f.start()

	type box struct {
		thread, secret, url string
		c                   container.InspectResponse
	}
	boxes := map[string]*box{}
	for _, th := range []string{"alice-d", "bob-d"} {
		if out := shell(t, g.URL, th, "echo ok-"+th).Output; !strings.Contains(out, "ok-"+th) {
			t.Fatalf("exec through the gateway in %s: %q", th, out)
		}
		c := d.containerOf(g.URL, th)
		b := &box{thread: th, c: c, secret: c.Config.Labels[secretLabel]}
		for _, m := range c.Mounts {
			if m.Destination == "/run/sandgate/api" {
				b.url = backend.UnixURL(filepath.Join(m.Source, c.Config.Labels["io.sandgate.api-socket"]))
			}
		}
		if len(b.secret) < 32 || b.url == "" || c.HostConfig.NetworkMode != "none" {
			t.Fatalf("%s: secret %d chars, url %q, network %q", th, len(b.secret), b.url, c.HostConfig.NetworkMode)
		}
		boxes[th] = b
	}
	alice, bob := boxes["alice-d"], boxes["bob-d"]
	if alice.secret == bob.secret {
		t.Fatal("two sandboxes share a secret")
	}

	// From the host.
	attackFromHost(t, alice.url, alice.secret, bob.secret)
	attackFromHost(t, bob.url, bob.secret, alice.secret)

	// From a local unprivileged user: the socket's dir is closed to it
	// (000), or the server refuses (401).
	for _, key := range []string{"", sharedKey, bob.secret} {
		hdr := []string{}
		if key != "" {
			hdr = append(hdr, sandboxspec.SecretHeader+": "+key)
		}
		for _, a := range v1Attacks {
			if out, _ := asNobody(t, curlStatus(a.method, alice.url, a.path, a.body, hdr...)...); out != "401" && out != "000" {
				t.Errorf("nobody: %s %s: %q, want 401 or 000", a.method, a.path, out)
			}
		}
	}

	// From bob's container there is nothing to reach alice's by: no
	// interface but lo, and only its own socket dir.
	inside := shell(t, g.URL, "bob-d", "cat /proc/net/dev; ls -A /run/sandgate/api").Output
	if strings.Contains(inside, "eth0") || strings.Count(inside, ".sock") != 1 {
		t.Fatalf("bob's container: %q", inside)
	}
	if out := shell(t, g.URL, "alice-d", "ls -A /mnt/user-data/workspace").Output; strings.Contains(out, "pwned") || strings.Contains(out, "planted") {
		t.Fatalf("an attack went through: %q", out)
	}

	// Nothing inside the container holds the secret: no file, no shell
	// environment, and the server's /proc entries are closed to commands
	// (non-dumpable), though they run as the server's own user.
	for _, b := range []*box{alice, bob} {
		out := shell(t, g.URL, b.thread, `ls -A /.sandgate; cat /.sandgate/secret 2>&1; env; `+
			`p=$(pidof gateway); echo server=$p; for f in environ cmdline; do cat /proc/$p/$f | tr '\0' ' '; echo; done; `+
			`cat /proc/$p/environ >/dev/null 2>&1 && echo ENVIRON-READABLE; readlink /proc/$p/fd/0 >/dev/null 2>&1 && echo FD-READABLE; `+
			`(exec 3</proc/$p/mem) 2>/dev/null && echo MEM-READABLE; echo end`).Output
		if strings.Contains(out, alice.secret) || strings.Contains(out, bob.secret) || strings.Contains(out, sharedKey) {
			t.Errorf("%s: a secret is readable inside the container: %q", b.thread, out)
		}
		if !strings.Contains(out, "No such file") || !strings.Contains(out, "server=") || !strings.Contains(out, "end") {
			t.Errorf("%s: secret file check did not run as expected: %q", b.thread, out)
		}
		if strings.Contains(out, "READABLE") {
			t.Errorf("%s: a command reads the sandbox server's /proc entries: %q", b.thread, out)
		}
		if strings.Contains(strings.Join(b.c.Config.Env, "\n"), b.secret) || strings.Contains(strings.Join(b.c.Args, " "), b.secret) ||
			strings.Contains(strings.Join(b.c.Config.Cmd, " "), b.secret) {
			t.Errorf("%s: the secret is in the container's environment or command line", b.thread)
		}
		pid := onlyChild(t, b.c.State.Pid)
		for _, file := range []string{"environ", "cmdline"} {
			raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
			if err != nil {
				t.Fatalf("read the server's %s (as root): %v", file, err)
			}
			if bytes.Contains(raw, []byte(b.secret)) {
				t.Errorf("%s: the secret is in /proc/%d/%s", b.thread, pid, file)
			}
		}
	}

	// A gateway that lost Redis adopts the containers and reaches them
	// with their secrets (from the label), not the shared key.
	g.kill()
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	g2 := f.start()
	for _, b := range []*box{alice, bob} {
		shell(t, g2.URL, b.thread, "true")
		if got := d.containerOf(g2.URL, b.thread).ID; got != b.c.ID {
			t.Errorf("%s: container %s after the Redis loss, want the adopted %s", b.thread, got, b.c.ID)
		}
	}

	// Nothing returns or logs it.
	for _, path := range []string{"/threads/alice-d/sandbox", "/api/sandboxes"} {
		_, body, _ := call(t, "GET", g2.URL+path, nil)
		if bytes.Contains(body, []byte(alice.secret)) || bytes.Contains(body, []byte(bob.secret)) {
			t.Errorf("GET %s returns a sandbox secret", path)
		}
	}
	logs := g.logs.String() + g2.logs.String()
	for _, b := range []*box{alice, bob} {
		logs += containerLogs(t, d, b.c.ID)
	}
	if !strings.Contains(logs, "sandbox server listening") {
		t.Fatal("no sandbox server logs to check")
	}
	if strings.Contains(logs, alice.secret) || strings.Contains(logs, bob.secret) {
		t.Error("a sandbox secret is in the logs")
	}
}

// onlyChild is the pid of the one child of pid (the sandbox server under the
// container's init), found through /proc.
func onlyChild(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		t.Fatalf("children of %d: %v", pid, err)
	}
	f := strings.Fields(string(raw))
	if len(f) != 1 {
		t.Fatalf("children of %d: %q, want one", pid, raw)
	}
	child, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}

// containerLogs is everything a container wrote.
func containerLogs(t *testing.T, d *dockerEnv, id string) string {
	t.Helper()
	rc, err := d.api.ContainerLogs(context.Background(), id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("container logs: %v", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && err != io.EOF {
		t.Fatalf("container logs: %v", err)
	}
	return buf.String()
}
