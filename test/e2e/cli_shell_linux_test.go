package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/testutil"
)

// TestCLIExec: `gateway exec` against a real gateway and sandbox streams
// the command's output as it comes and exits with its code.
func TestCLIExec(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"))
	g := f.start()

	r := runCLI(t, f.bin, g.URL, "alice-key", "exec", "t1", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if r.code != 7 || !strings.Contains(r.stdout, "out\n") || !strings.Contains(r.stdout, "err\n") {
		t.Fatalf("exec exit 7: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// One argument is a command line as is; arguments are quoted each.
	if r := runCLI(t, f.bin, g.URL, "alice-key", "exec", "t1", "--", "echo a b | wc -w").must(t, 0, "exec line"); strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("exec line: %q", r.stdout)
	}
	if r := runCLI(t, f.bin, g.URL, "alice-key", "exec", "t1", "--", "echo", "a b", "it's", "$HOME").must(t, 0, "exec argv"); r.stdout != "a b it's $HOME\n" {
		t.Fatalf("exec argv: %q", r.stdout)
	}
	runCLI(t, f.bin, g.URL, "alice-key", "exec", "t1").must(t, 2, "exec without a command")
	if r := runCLI(t, f.bin, g.URL, "wrong-key", "exec", "t1", "--", "true").must(t, 1, "exec with a bad key"); !strings.Contains(r.stderr, "401") {
		t.Fatalf("exec with a bad key: %s", r.stderr)
	}

	// Streaming: the first line arrives while the command still sleeps.
	cmd := exec.Command(f.bin, "exec", "t1", "--", "echo first; sleep 5; echo second")
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+g.URL, "SANDGATE_TOKEN=alice-key")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "first\n" || time.Since(start) > 4*time.Second {
		t.Fatalf("first line %q after %v (%v): not streamed", line, time.Since(start), err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec: %v", err)
	}
}

// TestCLIShellThroughPTY drives `gateway shell` as a person would, on a
// pseudo-terminal: lines typed run in one session (cd sticks), a window
// resize reaches the commands run after it as COLUMNS and LINES, exit
// leaves with the last command's status.
func TestCLIShellThroughPTY(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"))
	g := f.start()

	master, slave := openPTY(t)
	setSize(t, master, 80, 24)
	cmd := exec.Command(f.bin, "shell", "t1")
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+g.URL, "SANDGATE_TOKEN=alice-key")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0} // the pty is its terminal, as a login's is
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	screen := readAll(master)

	screen.waitFor(t, "t1$ ")
	type line struct{ in, want string }
	typeLines := func(lines ...line) {
		for _, l := range lines {
			if _, err := master.WriteString(l.in + "\n"); err != nil {
				t.Fatal(err)
			}
			screen.waitFor(t, l.want)
		}
	}
	typeLines(line{"echo size=$COLUMNS.$LINES", "size=80.24"}, line{"mkdir -p d1 && cd d1 && echo mo''ved", "moved"}, line{"pwd", "/d1\r\n"})
	setSize(t, master, 132, 40) // the kernel sends SIGWINCH to the shell command
	time.Sleep(300 * time.Millisecond)
	typeLines(line{"echo size=$COLUMNS.$LINES", "size=132.40"}, line{"false", "t1$ "})
	// exit leaves with the last command's status, as a shell does.
	if _, err := master.WriteString("exit\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
			t.Fatalf("shell ended with %v, want exit status 1 (false's):\n%s", err, screen)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("shell did not end on exit:\n%s", screen)
	}
}

// openPTY opens a pseudo-terminal pair (the test's side and the
// program's), with golang.org/x/sys/unix, already a dependency.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, slave
}

func setSize(t *testing.T, pty *os.File, cols, rows uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		t.Fatal(err)
	}
}

// screen is what a terminal has shown.
type screen struct {
	mu  sync.Mutex
	buf strings.Builder
	at  int // waitFor looks past this
}

func readAll(pty *os.File) *screen {
	s := &screen{}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := pty.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until want shows after what the last wait found.
func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		i := strings.Index(s.buf.String()[s.at:], want)
		if i >= 0 {
			s.at += i + len(want)
		}
		s.mu.Unlock()
		if i >= 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the terminal never showed %q:\n%s", want, s)
}

// TestCLIDiscoverable runs the real binary as a newcomer would: -h lists
// the commands before the server's flags, help and completion are
// commands, and a typo is answered with the closest word (issue 40,
// point 7). No gateway is needed.
func TestCLIDiscoverable(t *testing.T) {
	t.Parallel()
	bin := testutil.GatewayBinary(t)
	r := runCLI(t, bin, "http://127.0.0.1:1", "", "-h").must(t, 0, "-h")
	commands, flags := strings.Index(r.stderr, "Commands:\n"), strings.Index(r.stderr, "  -listen string")
	if commands < 0 || flags < commands || !strings.Contains(r.stderr, "\n  sandboxes    ") || !strings.Contains(r.stderr, "\n  exec         ") {
		t.Fatalf("-h lists no commands before the flags:\n%s", r.stderr)
	}
	if r := runCLI(t, bin, "http://127.0.0.1:1", "", "help").must(t, 0, "help"); !strings.Contains(r.stdout, "\n  completion   ") {
		t.Fatalf("help:\n%s", r.stdout)
	}
	if r := runCLI(t, bin, "http://127.0.0.1:1", "", "completion", "bash").must(t, 0, "completion"); !strings.Contains(r.stdout, "complete -F _gateway gateway") {
		t.Fatalf("completion bash:\n%s", r.stdout)
	}
	r = runCLI(t, bin, "http://127.0.0.1:1", "", "sandboxes", "lst").must(t, 2, "typo")
	if !strings.Contains(r.stderr, "Did you mean this?\n\tgateway sandboxes ls\n") || strings.Contains(r.stderr, "lst -h") {
		t.Fatalf("sandboxes lst:\n%s", r.stderr)
	}
	if r := runCLI(t, bin, "http://127.0.0.1:1", "", "sandboxs").must(t, 2, "top-level typo"); !strings.Contains(r.stderr, "\tgateway sandboxes\n") {
		t.Fatalf("sandboxs:\n%s", r.stderr)
	}
}
