package e2e

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// Two attacks of issue 33 run from inside a sandbox of the default process
// backend (process_isolation: namespaces), each with a control that shows
// the attack itself works where nothing stops it.

// TestJailRefusesIA32AndIOURing is finding 2: the seccomp filter knew only
// the native ABI, so unshare(CLONE_NEWUSER|CLONE_NEWNET|CLONE_NEWNS)
// through int $0x80 went through with full capabilities in the new user
// namespace, and io_uring_setup was allowed on the native ABI too. The
// probe (testdata/abiprobe, static) is put into the sandbox's workspace and
// run there; run on the host it is the control: every call goes through.
func TestJailRefusesIA32AndIOURing(t *testing.T) {
	t.Parallel()
	testutil.Require(t, runtime.GOARCH == "amd64", "an amd64 machine (the probe's int $0x80)")
	probe := buildTestdata(t, "abiprobe")

	// Control: not locked down (the test runs as root, as the gateway
	// does), the probe's calls work, so a refusal below is the jail's.
	out, err := exec.Command(probe).CombinedOutput()
	if err != nil {
		t.Fatalf("probe on the host: %v\n%s", err, out)
	}
	host := probeResults(t, string(out))
	// A kernel built or booted without ia32 emulation faults every int
	// $0x80 (the probe's "no ia32 ABI"): nothing is left to refuse, and
	// the sandbox must fault the same way, never get a call through.
	ia32Want := "EPERM"
	switch {
	case host["ia32_getpid"] == noIA32 && host["ia32_unshare"] == noIA32:
		ia32Want = noIA32
		t.Logf("this kernel runs no ia32 code: the jail's ia32 calls must fault as the host's do")
	case host["ia32_getpid"] != "ok":
		t.Fatalf("the probe's int $0x80 neither works nor faults on this host: %s", out)
	case os.Geteuid() == 0 && host["ia32_unshare"] != "ok":
		t.Fatalf("control: ia32 unshare as root on the host: %s", out)
	}
	// io_uring_disabled=2 refuses everyone, root too: the jail's refusal
	// is then not the only one, and the control cannot show the call works.
	if disabled, _ := os.ReadFile("/proc/sys/kernel/io_uring_disabled"); strings.TrimSpace(string(disabled)) != "2" && host["io_uring_setup"] != "ok" {
		t.Fatalf("control: io_uring_setup on the host: %s", out)
	}

	f := newFleet(t)
	g := f.start()
	const th = "abi"
	run(t, g, th, "true")
	dst := filepath.Join(backend.ThreadDir(f.dataDir, "default", th), "workspace", "abiprobe")
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out2, code := run(t, g, th, "/mnt/user-data/workspace/abiprobe 2>&1; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status")
	if code != 0 || !strings.Contains(out2, "Seccomp:\t2") {
		t.Fatalf("the probe did not run under the jail's filter (exit %d):\n%s", code, out2)
	}
	jailed := probeResults(t, out2)
	for call, want := range map[string]string{"ia32_unshare": ia32Want, "io_uring_setup": "EPERM", "ia32_getpid": ia32Want} {
		if jailed[call] != want {
			t.Errorf("%s in the jail: %q, want %s (host: %q)", call, jailed[call], want, host[call])
		}
	}
	if t.Failed() {
		t.Logf("probe in the sandbox:\n%s", out2)
	}
}

// noIA32 is the probe's result for an int $0x80 the kernel faults.
const noIA32 = "no ia32 ABI"

// probeResults parses testdata/abiprobe's "<call>: <result>" lines; it
// fails the test when one of its three calls is missing.
func probeResults(t *testing.T, out string) map[string]string {
	t.Helper()
	res := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			res[k] = strings.TrimSpace(v)
		}
	}
	for _, call := range []string{"ia32_getpid", "ia32_unshare", "io_uring_setup"} {
		if res[call] == "" {
			t.Fatalf("probe printed no result for %s:\n%s", call, out)
		}
	}
	return res
}

// TestEgressTunnelRefusesAnotherSNI is finding 9: a CONNECT tunnel was
// judged by its CONNECT name only, so a sandbox could open
// CONNECT example.internal (allowed) and speak TLS for other.internal
// (not allowed) to the same shared host: domain fronting. curl's
// --connect-to sends exactly that. The origin counts TCP connections: the
// refused tunnel must make none; the control, the same request with the
// matching name, makes one.
func TestEgressTunnelRefusesAnotherSNI(t *testing.T) {
	t.Parallel()
	w := newEgressWorld(t)
	var accepted atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("origin on 127.0.0.2: %v", err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, originBody)
	}))
	ts.Listener.Close()
	ts.Listener = countingListener{ln, &accepted}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	f := newFleet(t, w.flags("proxy")...)
	g := f.start()
	const th = "fronting"
	fronted := "curl -sS -k -m 20 --connect-to other.internal:" + port + ":example.internal:" + port +
		" https://other.internal:" + port + "/ 2>&1; echo rc=$?"
	out, _ := run(t, g, th, fronted)
	if strings.Contains(out, originBody) || strings.Contains(out, "rc=0") || accepted.Load() != 0 {
		t.Fatalf("a tunnel for example.internal carried TLS for other.internal: origin accepted %d connections:\n%s", accepted.Load(), out)
	}
	// The refusal is the SNI check's, not the allow-list's: curl sent
	// CONNECT example.internal, which is allowed.
	if !strings.Contains(g.logs.String(), "sni_mismatch") {
		t.Fatalf("no sni_mismatch in the gateway's log:\n%s", tail(g.logs.String(), 30))
	}
	out, _ = run(t, g, th, "curl -sS -k -m 20 https://example.internal:"+port+"/ 2>&1; echo rc=$?")
	if !strings.Contains(out, originBody) || accepted.Load() != 1 {
		t.Fatalf("control, the matching name: origin accepted %d connections:\n%s", accepted.Load(), out)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
