package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The attacks of issue 17, each run from inside a sandbox of the default
// process backend (process_isolation: namespaces) the way an attacker on
// POST /threads/attacker/v1/shell/exec would. Each must fail to do harm.

// isolatedFleet starts one gateway of the default process backend with
// small limits (so the hogs below stay bounded on the test machine) and a
// canary in its environment.
func isolatedFleet(t *testing.T) (*fleet, *gateway, string) {
	t.Helper()
	testutil.Require(t, lookPath("python3"), "python3")
	f := newFleet(t, "--process-memory", "128m", "--process-pids-limit", "64")
	canary := "canary-" + randHex(8)
	f.env = []string{"SANDGATE_E2E_CANARY=" + canary}
	return f, f.start(), canary
}

func lookPath(name string) bool { _, err := exec.LookPath(name); return err == nil }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run is shell's output and exit code, in one string for messages.
func run(t *testing.T, g *gateway, thread, command string, hdr ...string) (string, int) {
	t.Helper()
	d := shell(t, g.URL, thread, command, hdr...)
	code := -1
	if d.ExitCode != nil {
		code = *d.ExitCode
	}
	return d.Output, code
}

func TestIsolationAttacksFail(t *testing.T) {
	t.Parallel()
	f, g, canary := isolatedFleet(t)
	const secret = "victim-secret-4711"
	if out, code := run(t, g, "victim", "echo "+secret+" > /mnt/user-data/workspace/secret.txt && sleep 300 & echo started"); code != 0 {
		t.Fatalf("victim: %d %s", code, out)
	}
	run(t, g, "attacker", "true")
	gwPID := g.cmd.Process.Pid
	var victimPID int
	for _, info := range f.sandboxes() {
		if info.Thread == "victim" {
			pid, _, _ := strings.Cut(info.Incarnation, "-")
			victimPID, _ = strconv.Atoi(pid)
		}
	}
	if victimPID == 0 {
		t.Fatal("victim sandbox not listed")
	}
	redisPort := strings.TrimPrefix(f.redis.URL()[strings.LastIndex(f.redis.URL(), ":"):], ":")
	gwPort := g.URL[strings.LastIndex(g.URL, ":")+1:]

	// An abstract Unix socket in the host's network namespace: reachable
	// by path-less name from any process sharing it.
	abstract := "@sandgate-e2e-" + randHex(6)
	ln, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	for _, tc := range []struct {
		name, command string
		harmless      func(out string, code int) bool
	}{
		{"other thread's files", "cat ../../../*/victim/user-data/workspace/secret.txt /mnt/*/*/victim/*/*/secret.txt 2>&1; " +
			"find / -xdev -name secret.txt 2>/dev/null; grep -rs " + secret + " /mnt /tmp; true",
			func(out string, _ int) bool { return !strings.Contains(out, secret) }},
		{"gateway in /proc", "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; test -e /proc/" + itoa(gwPID) + " && echo SEEN",
			func(out string, _ int) bool { return !strings.Contains(out, "SEEN") }},
		{"environ of anything", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c " + canary + "; env | grep -c SANDGATE_; true",
			func(out string, _ int) bool { return strings.Join(strings.Fields(out), " ") == "0 0" }},
		{"kill the gateway", "kill -STOP " + itoa(gwPID) + " 2>&1; kill -9 " + itoa(gwPID) + " 2>&1; echo rc=$?",
			func(out string, _ int) bool { return strings.Contains(out, "rc=1") }},
		{"kill another sandbox", "kill -9 " + itoa(victimPID) + " 2>&1; kill -9 -" + itoa(victimPID) + " 2>&1; echo rc=$?",
			func(out string, _ int) bool { return strings.Contains(out, "rc=1") }},
		{"Redis on the host's loopback", "timeout 3 bash -c 'echo PING > /dev/tcp/127.0.0.1/" + redisPort + "' 2>&1; echo rc=$?",
			func(out string, _ int) bool { return !strings.Contains(out, "rc=0") }},
		{"the gateway's port", "timeout 3 bash -c 'echo > /dev/tcp/127.0.0.1/" + gwPort + "' 2>&1; echo rc=$?",
			func(out string, _ int) bool { return !strings.Contains(out, "rc=0") }},
		{"host abstract socket", "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0" + abstract[1:] + "')\" 2>&1; echo rc=$?",
			func(out string, _ int) bool { return !strings.Contains(out, "rc=0") }},
		{"no route off the sandbox", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; tail -n +2 /proc/net/route | wc -l",
			// Only lo, and no route at all: a packet to anywhere else is
			// refused (ENETUNREACH) before it could leave.
			func(out string, _ int) bool {
				return strings.Fields(out)[0] == "lo" && len(strings.Fields(out)) == 2 && strings.Fields(out)[1] == "0"
			}},
		{"mount", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m 2>&1; echo rc=$?",
			func(out string, _ int) bool { return !strings.Contains(out, "rc=0") }},
		{"new user namespace", "unshare -U true 2>&1; echo rc=$?; unshare -Ur true 2>&1; echo rc=$?",
			func(out string, _ int) bool { return !strings.Contains(out, "rc=0") }},
		{"ptrace", "sleep 30 & python3 -c \"import ctypes,sys; print('ptrace', ctypes.CDLL(None, use_errno=True).ptrace(16, int(sys.argv[1]), 0, 0))\" $!; kill %1",
			func(out string, _ int) bool { return strings.Contains(out, "ptrace -1") }},
		{"read-only system", "for p in /usr/bin/x /etc/x /x /.sandgate/sandgate /mnt/x; do touch $p 2>/dev/null && echo WROTE $p; done; " +
			"echo ok > /tmp/t && echo ok > /mnt/user-data/workspace/t && echo writable-ok",
			func(out string, _ int) bool {
				return !strings.Contains(out, "WROTE") && strings.Contains(out, "writable-ok")
			}},
		{"capabilities and privileges", "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '; id -u",
			func(out string, _ int) bool {
				for _, cap := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
					if !strings.Contains(out, cap+": 0000000000000000") {
						return false
					}
				}
				return strings.Contains(out, "NoNewPrivs: 1") && strings.Contains(out, "Seccomp: 2") && strings.HasSuffix(strings.TrimSpace(out), "1000")
			}},
	} {
		out, code := run(t, g, "attacker", tc.command)
		if !tc.harmless(out, code) {
			t.Errorf("%s: the attack worked (exit %d):\n%s", tc.name, code, out)
		}
	}
	if code, _, _ := call(t, "GET", g.URL+"/healthz", nil); code != 200 {
		t.Fatalf("gateway health after the attacks: %d", code)
	}
	if out, _ := run(t, g, "victim", "cat /mnt/user-data/workspace/secret.txt"); !strings.Contains(out, secret) {
		t.Fatalf("victim lost its file or sandbox: %q", out)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A setuid binary the sandbox writes grants nothing: inside, the sandbox's
// own uid; on the host, the file belongs to the sandbox's unprivileged host
// uid, never root or the gateway's user.
func TestIsolationSetuidGivesNothing(t *testing.T) {
	t.Parallel()
	f, g, _ := isolatedFleet(t)
	out, _ := run(t, g, "suid", "cp /bin/bash /mnt/user-data/workspace/rootsh && chmod 4755 /mnt/user-data/workspace/rootsh && "+
		"/mnt/user-data/workspace/rootsh -p -c 'id -u; id -g'")
	if strings.Fields(out)[0] != "1000" {
		t.Fatalf("setuid file inside ran as %q", out)
	}
	host := filepath.Join(backend.ThreadDir(f.dataDir, "default", "suid"), "workspace", "rootsh")
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid == 0 || int(st.Uid) == os.Geteuid() {
		t.Fatalf("sandbox file on the host belongs to uid %d: a setuid bit would grant it", st.Uid)
	}
	// Run on the host by nobody: the most it can become is the owner, the
	// sandbox's own host uid.
	cmd := exec.Command(host, "-p", "-c", "id -u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	hostOut, err := cmd.CombinedOutput()
	if err == nil && strings.TrimSpace(string(hostOut)) == "0" {
		t.Fatalf("setuid sandbox file made nobody root on the host")
	}
}

// An orphan (a background process whose shell exited) becomes the jail's
// init's child, the sandbox server's; when it dies, the server reaps it at
// once on SIGCHLD (no timer wakes idle sandboxes any more), so a command
// that leaves orphans behind fills no process table with zombies.
func TestIsolationReapsOrphans(t *testing.T) {
	t.Parallel()
	_, g, _ := isolatedFleet(t)
	out, code := run(t, g, "orphans", "(sleep 0.3 >/dev/null 2>&1 & echo $! > /tmp/orphan); sleep 0.05; "+
		"cut -d' ' -f4 /proc/$(cat /tmp/orphan)/stat")
	if code != 0 || strings.TrimSpace(out) != "1" {
		t.Fatalf("the orphan's parent: %q (exit %d), want 1: the jail's init", out, code)
	}
	zombies := "n=0; for f in /proc/[0-9]*/stat; do case $(cat $f 2>/dev/null) in *') Z '*) n=$((n+1));; esac; done; echo $n; " +
		"test -e /proc/$(cat /tmp/orphan) && echo present || echo gone"
	deadline := time.Now().Add(2 * time.Second)
	for {
		out, _ = run(t, g, "orphans", "sleep 0.3; "+zombies)
		if strings.Fields(out)[0] == "0" && strings.Contains(out, "gone") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan not reaped within 2 s of its exit: %q (zombies, its /proc entry)", out)
		}
	}
}

// A fork bomb stops at the process limit and a 3 GiB hog at the memory
// limit, while the gateway and another sandbox keep answering.
func TestIsolationLimitsStopHogs(t *testing.T) {
	t.Parallel()
	_, g, _ := isolatedFleet(t)
	run(t, g, "bystander", "true")
	// Forks until refused, then kills what it started: the count of forks
	// that succeeded is the budget the commands had.
	out, _ := run(t, g, "bomb", `python3 -c "
import os, signal, time
pids = []
try:
    while len(pids) < 300:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
    print('unstopped', len(pids))
except OSError as e:
    print('stopped', len(pids), e.errno)
for p in pids:
    os.kill(p, signal.SIGKILL)
"`)
	// The commands' budget is 64 tasks of the sandbox's uid; the server's
	// threads and the shell count against it too.
	var n, errno int
	if _, err := fmt.Sscanf(out, "stopped %d %d", &n, &errno); err != nil || n > 64 || errno != int(syscall.EAGAIN) {
		t.Fatalf("fork bomb under a limit of 64: %q", out)
	}
	out, code := run(t, g, "hog", "python3 -c \"b = b'x' * (3 << 30); print('ALLOCATED', len(b))\" 2>&1; echo rc=$?")
	if strings.Contains(out, "ALLOCATED 3") || strings.Contains(out, "rc=0") {
		t.Fatalf("a 3 GiB hog ran under a 128m limit (exit %d): %s", code, out)
	}
	if out, _ := run(t, g, "bystander", "echo alive"); !strings.Contains(out, "alive") {
		t.Fatalf("another sandbox stopped answering: %q", out)
	}
	if code, _, _ := call(t, "GET", g.URL+"/healthz", nil); code != 200 {
		t.Fatalf("gateway health: %d", code)
	}
}

// The file API cannot leave the sandbox's root through a symlink: the root
// it resolves against is the sandbox's own.
func TestIsolationFileAPISymlinkStaysInside(t *testing.T) {
	t.Parallel()
	f, g, _ := isolatedFleet(t)
	hostFile := filepath.Join(f.dataDir, "host-only-"+randHex(4))
	if err := os.WriteFile(hostFile, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, g, "links", "ln -s / /mnt/user-data/workspace/root && ln -s "+hostFile+" /mnt/user-data/workspace/direct")
	for _, p := range []string{"/mnt/user-data/workspace/direct", "/mnt/user-data/workspace/root" + hostFile, hostFile} {
		code, body, _ := call(t, "POST", g.URL+"/threads/links/v1/file/read", map[string]any{"file": p})
		if strings.Contains(string(body), "host secret") {
			t.Fatalf("file/read %s reached the host file (status %d)", p, code)
		}
	}
}
