package jail

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/testutil"
)

// The lock-down cannot be undone, so tests run it in a child: the test
// binary re-executed with scenarioEnv naming what to do (TestMain). The
// child is started the way the sandbox's init is: new user, mount, PID,
// network, IPC and UTS namespaces, uid 1000 mapped to a host uid of its
// own, CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP ambient.
const scenarioEnv = "SANDGATE_JAIL_TEST_SCENARIO"

// testScenarios run in a child instead of the tests; each returns the exit
// code. Other tests of the package may add theirs.
var testScenarios = map[string]func() int{
	"control": func() int { return initScenario(nil, "probes") },
	"locked": func() int {
		return initScenario(func(rw string) (Report, error) {
			return lockDown(Limits{}.WithDefaults(), false, []string{rw, "/dev/shm"}, testSeccomp())
		}, "probes")
	},
	"limits": func() int {
		return initScenario(func(rw string) (Report, error) {
			return lockDown(testLimits, true, []string{rw}, testSeccomp())
		}, "limit-probes")
	},
	"probes":       runProbes,
	"limit-probes": runLimitProbes,
	"alloc":        runAlloc,
}

// testLimits are small enough to reach in a test.
var testLimits = Limits{Processes: 20, OpenFiles: 64, FileSize: 1 << 20, Memory: 128 << 20}.WithDefaults()

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == InitCommand {
		os.Exit(runInit())
	}
	if name := os.Getenv(scenarioEnv); name != "" {
		run, ok := testScenarios[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown test scenario %q\n", name)
			os.Exit(2)
		}
		os.Exit(run())
	}
	code := m.Run()
	if testBinDir != "" {
		_ = os.RemoveAll(testBinDir)
	}
	os.Exit(code)
}

// result is one probe's outcome, a JSON line on the child's stdout.
type result struct {
	Name string `json:"name"`
	Err  string `json:"err,omitempty"`
	Out  string `json:"out,omitempty"`
}

var (
	testBinOnce sync.Once
	testBinDir  string
	testBinPath string
	testBinErr  error
	nextUID     atomic.Int64
)

// jailedBinary is this package's test binary built with CGO_ENABLED=0,
// as the gateway is (lockDown needs syscall.AllThreadsSyscall, which cgo,
// and so -race, rules out), in a directory the sandbox's uid may read.
func jailedBinary(t testing.TB) string {
	t.Helper()
	var out []byte
	testBinOnce.Do(func() {
		testBinDir, testBinErr = os.MkdirTemp("", "sandgate-jail-")
		if testBinErr != nil {
			return
		}
		if testBinErr = os.Chmod(testBinDir, 0o755); testBinErr != nil {
			return
		}
		testBinPath = filepath.Join(testBinDir, "jail.test")
		cmd := exec.Command("go", "test", "-c", "-o", testBinPath, "./internal/jail")
		cmd.Dir = testutil.ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, testBinErr = cmd.CombinedOutput()
	})
	if testBinErr != nil {
		t.Fatalf("build the CGO-off test binary: %v\n%s", testBinErr, out)
	}
	return testBinPath
}

// sandboxUID is a host uid no other test (or test process) uses, so that
// RLIMIT_NPROC counts this sandbox's processes only.
func sandboxUID() int {
	return 1_500_000 + os.Getpid()%20_000*32 + int(nextUID.Add(1))
}

// jailDirs makes rw (to be writable in the sandbox) and ro (writable by
// file permissions, not by Landlock), both owned by uid, and ro/readme.
func jailDirs(t *testing.T, uid int) (rw, ro string) {
	t.Helper()
	jailedBinary(t)
	base, err := os.MkdirTemp(testBinDir, "dirs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	rw, ro = filepath.Join(base, "rw"), filepath.Join(base, "ro")
	readme := filepath.Join(ro, "readme")
	for _, err := range []error{
		os.Chmod(base, 0o755), os.Mkdir(rw, 0o755), os.Mkdir(ro, 0o755), os.WriteFile(readme, []byte("hello"), 0o644),
		os.Lchown(rw, uid, uid), os.Lchown(ro, uid, uid), os.Lchown(readme, uid, uid),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return rw, ro
}

// requireJail skips (fails under CI=true) without what the jailed child
// needs: root to map an arbitrary host uid, user namespaces, Landlock.
func requireJail(t *testing.T) {
	t.Helper()
	testutil.Require(t, os.Geteuid() == 0, "root (to map a sandbox's host uid)")
	n, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
	testutil.Require(t, strings.TrimSpace(string(n)) != "0" && len(n) > 0, "user namespaces")
	testutil.Require(t, landlockABI() >= 6, "Landlock ABI 6 or later")
}

// runJailed runs scenario as the init of a new sandbox and returns its
// results by name.
func runJailed(t *testing.T, scenario string) map[string]result {
	t.Helper()
	uid := sandboxUID()
	rw, ro := jailDirs(t, uid)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, jailedBinary(t))
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), scenarioEnv+"="+scenario, "JAIL_RW="+rw, "JAIL_RO="+ro)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 1000, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 1000, HostID: uid, Size: 1}},
		Credential:  &syscall.Credential{Uid: 1000, Gid: 1000, NoSetGroups: true},
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP},
		Pdeathsig:   syscall.SIGKILL,
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jailed %s: %v\nstdout:\n%s\nstderr:\n%s", scenario, err, out, stderr.String())
	}
	results := map[string]result{}
	for line := range strings.Lines(string(out)) {
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("jailed %s: bad line %q: %v", scenario, line, err)
		}
		results[r.Name] = r
	}
	t.Logf("jailed %s:\n%s%s", scenario, out, stderr.String())
	return results
}

// emit writes one result line.
func emit(name string, err error, out string) {
	r := result{Name: name, Out: out}
	if err != nil {
		r.Err = err.Error()
	}
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
}

// initScenario is the sandbox's init: it locks down (unless lock is nil),
// checks itself, then runs the probes scenario in a process it starts
// afterwards.
func initScenario(lock func(rw string) (Report, error), probes string) int {
	rw, ro := os.Getenv("JAIL_RW"), os.Getenv("JAIL_RO")
	if lock != nil {
		r, err := lock(rw)
		emit("init lockdown", err, r.String())
		if err != nil {
			return 0
		}
		emit("init threads", threadsLocked(), "")
		emit("init write outside", os.WriteFile(filepath.Join(ro, "init"), nil, 0o644), "")
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), scenarioEnv+"="+probes)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	emit("probes ran", cmd.Run(), "")
	return 0
}

// threadsLocked checks every thread of this process: no capability,
// no_new_privs, seccomp filter mode.
func threadsLocked() error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("no threads: %v", err)
	}
	for _, task := range tasks {
		status, err := os.ReadFile(task)
		if err != nil {
			return err
		}
		if err := statusLocked(string(status)); err != nil {
			return fmt.Errorf("%s: %w", task, err)
		}
	}
	return nil
}

// statusLocked checks a /proc/<pid>/status.
func statusLocked(status string) error {
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	s := bufio.NewScanner(strings.NewReader(status))
	for s.Scan() {
		key, value, _ := strings.Cut(s.Text(), ":")
		if w, ok := want[key]; ok {
			if v := strings.TrimSpace(value); v != w {
				return fmt.Errorf("%s is %s, want %s", key, v, w)
			}
			delete(want, key)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("missing %v", want)
	}
	return nil
}

// shell runs script with /bin/sh, RW and RO set, and returns its output.
func shell(script string) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "RW="+os.Getenv("JAIL_RW"), "RO="+os.Getenv("JAIL_RO"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// startFails starts /bin/true with attr and stops it again.
func startFails(attr *syscall.SysProcAttr) error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return err
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil
}

func errnoOf(_, _ uintptr, e syscall.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// runProbes tries what a sandboxed process must not do, and what it must
// still do, emitting a result for each.
func runProbes() int {
	rw, ro := os.Getenv("JAIL_RW"), os.Getenv("JAIL_RO")
	probe := func(name string, f func() error) { emit(name, f(), "") }

	probe("mount", func() error {
		dir := filepath.Join(rw, "mnt")
		_ = os.Mkdir(dir, 0o755)
		err := unix.Mount("x", dir, "tmpfs", 0, "")
		if err == nil {
			_ = unix.Unmount(dir, 0)
		}
		return err
	})
	probe("clone newuser", func() error {
		return startFails(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER})
	})
	probe("clone newnet", func() error {
		return startFails(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET})
	})
	probe("clone3", func() error { return errnoOf(unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)) })
	probe("ptrace", func() error { return startFails(&syscall.SysProcAttr{Ptrace: true}) })
	probe("bpf", func() error { return errnoOf(unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)) })
	probe("keyctl", func() error {
		_, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_PROCESS_KEYRING, true)
		return err
	})
	probe("add_key", func() error {
		_, err := unix.AddKey("user", "sandgate-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		return err
	})
	probe("perf_event_open", func() error {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
		if err == nil {
			_ = unix.Close(fd)
		}
		return err
	})
	probe("personality query", func() error { return errnoOf(unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)) })
	probe("personality no-aslr", func() error {
		err := errnoOf(unix.Syscall(unix.SYS_PERSONALITY, addrNoRandomize, 0, 0))
		_, _, _ = unix.Syscall(unix.SYS_PERSONALITY, 0, 0, 0)
		return err
	})
	probe("write inside", func() error { return os.WriteFile(filepath.Join(rw, "probe"), []byte("x"), 0o644) })
	probe("write outside", func() error { return os.WriteFile(filepath.Join(ro, "probe"), []byte("x"), 0o644) })
	probe("read outside", func() error { _, err := os.ReadFile(filepath.Join(ro, "readme")); return err })
	probe("pty", openPty)
	probe("threads", manyThreads)
	for _, s := range []struct{ name, script string }{
		{"sh mount", `mkdir -p "$RW/m2" && mount -t tmpfs x "$RW/m2"`},
		{"sh unshare -U", `/usr/bin/unshare -U true`},
		{"sh pipe", `test "$(echo hello | tr h j | cat)" = jello`},
		{"sh dev null", `echo x > /dev/null && head -c 1 /dev/zero >/dev/null`},
		{"sh write inside", `echo x > "$RW/sh" && mv "$RW/sh" "$RW/sh2" && rm "$RW/sh2"`},
		{"sh write outside", `echo x > "$RO/sh"`},
	} {
		_, err := shell(s.script)
		emit(s.name, err, "")
	}
	status, err := shell("cat /proc/self/status")
	if err == nil {
		err = statusLocked(status)
	}
	emit("sh locked", err, "")
	return 0
}

// openPty opens a pty pair through /dev/ptmx and sets the terminal's size
// and mode, as the sandbox's terminal sessions do.
func openPty() error {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer ptmx.Close()
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		return fmt.Errorf("ptsname: %w", err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer pts.Close()
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 100}); err != nil {
		return fmt.Errorf("set window size: %w", err)
	}
	termios, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		return fmt.Errorf("get termios: %w", err)
	}
	termios.Lflag &^= unix.ECHO | unix.ICANON
	if err := unix.IoctlSetTermios(int(pts.Fd()), unix.TCSETS, termios); err != nil {
		return fmt.Errorf("set termios: %w", err)
	}
	if _, err := pts.WriteString("hi\n"); err != nil {
		return err
	}
	buf := make([]byte, 16)
	_, err = io.ReadAtLeast(ptmx, buf, 2)
	return err
}

// manyThreads makes the Go runtime start new OS threads.
func manyThreads() error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			// A locked goroutine that blocks in a syscall forces
			// another thread for the others.
			runtime.LockOSThread()
			var ts unix.Timespec
			errs <- unix.Nanosleep(&unix.Timespec{Nsec: 20_000_000}, &ts)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// expect is what a probe should give: "ok", "fail" (any error), an errno
// name, "!" and an errno name (anything but that errno, success too), or
// "" for no expectation.
type expect = string

var errnos = map[string]syscall.Errno{
	"EPERM": syscall.EPERM, "EACCES": syscall.EACCES, "ENOSYS": syscall.ENOSYS, "EINVAL": syscall.EINVAL,
}

// noIA32 is an ia32 call's result on a kernel that faults int $0x80
// (seccomp_walk_amd64_test.go).
const noIA32 = "no ia32 emulation"

// checkResults compares results with want, by name.
func checkResults(t *testing.T, results map[string]result, want map[string]expect) {
	t.Helper()
	for name, w := range want {
		r, ok := results[name]
		switch {
		case !ok:
			t.Errorf("%s: no result", name)
		case w == "ok" && r.Err != "":
			t.Errorf("%s: %s, want success", name, r.Err)
		case w == "fail" && r.Err == "":
			t.Errorf("%s: succeeded, want failure", name)
		case w == noIA32 && r.Err != noIA32:
			t.Errorf("%s: %q, want the fault of a kernel without ia32 emulation", name, r.Err)
		case errnos[w] != 0 && !strings.Contains(r.Err, errnos[w].Error()):
			t.Errorf("%s: %q, want %s", name, r.Err, w)
		case strings.HasPrefix(w, "!") && r.Err != "" && strings.Contains(r.Err, errnos[w[1:]].Error()):
			t.Errorf("%s: %q, want anything but %s", name, r.Err, w[1:])
		}
	}
}

func TestLockDown(t *testing.T) {
	requireJail(t)
	// Each probe is expected to fail locked down and (where the
	// machine allows it) to work in the control sandbox, which has the
	// same namespaces and capabilities but no lockDown: so a probe that
	// passes locked down proves the protection, not a missing feature.
	tests := []struct {
		name   string
		locked expect
		ctrl   expect
	}{
		{"init lockdown", "ok", ""},
		{"init threads", "ok", ""},
		{"init write outside", "EACCES", ""},
		{"probes ran", "ok", "ok"},
		{"mount", "EPERM", "ok"},
		{"clone newuser", "EPERM", "ok"},
		{"clone newnet", "EPERM", "ok"},
		{"clone3", "ENOSYS", "EINVAL"},
		{"ptrace", "EPERM", "ok"},
		{"bpf", "EPERM", ""},
		{"keyctl", "EPERM", "ok"},
		{"add_key", "EPERM", "ok"},
		{"perf_event_open", "EPERM", ""},
		{"personality query", "ok", "ok"},
		{"personality no-aslr", "EPERM", "ok"},
		{"write inside", "ok", "ok"},
		{"write outside", "EACCES", "ok"},
		{"read outside", "ok", "ok"},
		{"pty", "ok", "ok"},
		{"threads", "ok", "ok"},
		{"sh mount", "fail", ""},
		{"sh unshare -U", "fail", "ok"},
		{"sh pipe", "ok", "ok"},
		{"sh dev null", "ok", "ok"},
		{"sh write inside", "ok", "ok"},
		{"sh write outside", "fail", "ok"},
		{"sh locked", "ok", "fail"},
	}
	for _, mode := range []string{"locked", "control"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			want := map[string]expect{}
			for _, tt := range tests {
				w := tt.locked
				if mode == "control" {
					w = tt.ctrl
				}
				if w != "" {
					want[tt.name] = w
				}
			}
			checkResults(t, runJailed(t, mode), want)
		})
	}
}

// addrNoRandomize is the persona that turns address randomisation off
// (ADDR_NO_RANDOMIZE, linux/personality.h).
const addrNoRandomize = 0x0040000
