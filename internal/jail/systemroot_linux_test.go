package jail

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// runInit is the test binary as a sandbox's init (Command.Start runs it as
// InitCommand): it builds the jail and execs the spec's Args in it.
func runInit() int {
	args, err := Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	if len(args) == 0 {
		return 0
	}
	err = syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 1
}

func init() { testScenarios["system-root"] = startSystemRoot }

// systemRootCommand is the jail runSystemRoot starts: bin as its init,
// `sh -c script` on the system root, uid its host uid.
func systemRootCommand(bin, root, script string, uid int, out *os.File) Command {
	return Command{
		Binary: bin,
		Spec: Spec{
			SystemRoot:     root,
			Dir:            "/",
			Args:           []string{"/bin/sh", "-c", script},
			Env:            []string{"PATH=/usr/bin:/bin"},
			MemoryByRlimit: true,
			Seccomp:        testSeccomp(),
		},
		UID: uid, GID: uid, Output: out,
	}
}

// startSystemRoot is the system-root scenario: a gateway that is not root
// (the test runs it as nobody) starts the jail. It may not clone mounts, so
// the child opens the system root by path.
func startSystemRoot() int {
	bin, err := os.Executable()
	if err == nil {
		c := systemRootCommand(bin, os.Getenv("JAIL_SYSTEM_ROOT"), os.Getenv("JAIL_SCRIPT"), os.Getuid(), os.Stdout)
		var cmd *exec.Cmd
		if cmd, err = c.Start(); err == nil {
			err = cmd.Wait()
		}
	}
	if err != nil {
		fmt.Println("jail:", err)
		return 1
	}
	return 0
}

// runSystemRoot runs `sh -c script` in a full jail whose SystemRoot is root
// and returns its output (the init's report included). The jail is started
// by this process (root: it hands the child a detached clone of root) or,
// unprivileged, by the test binary run as nobody.
func runSystemRoot(t *testing.T, root, script string, unprivileged bool) (string, error) {
	t.Helper()
	requireJail(t)
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var cmd *exec.Cmd
	if unprivileged {
		cmd = exec.Command(jailedBinary(t))
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), scenarioEnv+"=system-root", "JAIL_SYSTEM_ROOT="+root, "JAIL_SCRIPT="+script)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		err = cmd.Start()
	} else {
		c := systemRootCommand(jailedBinary(t), root, script, sandboxUID(), log)
		cmd, err = c.Start()
	}
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		err = <-done
	}
	out, _ := os.ReadFile(log.Name())
	return string(out), err
}

// nobody is the uid and gid of an unprivileged gateway.
const nobody = 65534

// applets are the busybox commands a test root links.
var applets = []string{"sh", "ls", "cat", "echo", "test", "readlink", "rm", "mkdir", "chmod", "grep", "tr",
	"stat", "printf", "ln", "cp", "chown", "mknod", "cut"}

// busyboxRoot makes a system root (world-readable, as the sandbox's host
// uid must read it) with a static busybox and its applets in binDir.
func busyboxRoot(t *testing.T, binDir string) string {
	t.Helper()
	busybox, err := testutil.StaticBusybox()
	testutil.Require(t, err == nil, fmt.Sprint("static busybox: ", err))
	jailedBinary(t)
	root, err := os.MkdirTemp(testBinDir, "sysroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	body, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, binDir)
	must(t, os.Chmod(root, 0o755), os.MkdirAll(bin, 0o755), os.WriteFile(filepath.Join(bin, "busybox"), body, 0o755))
	for _, a := range applets {
		must(t, os.Symlink("busybox", filepath.Join(bin, a)))
	}
	return root
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A system root replaces the host's programs: its shell runs, its /usr/bin
// is what the sandbox lists, a host binary it lacks is absent, and nothing
// of it is writable.
func TestSystemRootIsTheImages(t *testing.T) {
	t.Parallel()
	const hostOnly = "/usr/bin/perl"
	testutil.Require(t, fileExists(hostOnly), hostOnly+" on the host")
	root := busyboxRoot(t, "usr/bin")
	must(t, os.Symlink("usr/bin", filepath.Join(root, "bin")),
		os.MkdirAll(filepath.Join(root, "etc", "ssl"), 0o755),
		os.WriteFile(filepath.Join(root, "etc", "ssl", "mark"), []byte("IMAGE-SSL"), 0o644),
		os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("image-passwd"), 0o644),
		os.MkdirAll(filepath.Join(root, "opt", "tool"), 0o755))
	out, err := runSystemRoot(t, root, `
		echo "ls: $(ls /usr/bin | tr '\n' ' ')"
		echo "bin: $(readlink /bin)"
		test ! -e `+hostOnly+` && echo "no host binary"
		echo "ssl: $(cat /etc/ssl/mark)"
		grep -q '^sandbox:' /etc/passwd && echo "jail passwd"
		test -d /opt/tool && echo "opt"
		for f in /usr/bin/new /usr/bin/busybox /etc/ssl/mark /opt/tool/x /bin/new; do
			if (echo x >$f) 2>/dev/null; then echo "WROTE $f"; fi
		done
		if mkdir /usr/dir 2>/dev/null; then echo "WROTE /usr/dir"; fi
		if chmod 777 /usr/bin/busybox 2>/dev/null; then echo "CHMOD"; fi
		if rm /usr/bin/ls 2>/dev/null; then echo "REMOVED"; fi
		echo done`, false)
	if err != nil {
		t.Fatalf("jail: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	listed := append(slices.Clone(applets), "busybox")
	slices.Sort(listed)
	for _, want := range []string{
		"ls: " + strings.Join(listed, " ") + " \n",
		"bin: usr/bin\n", "no host binary\n", "jail passwd\n", "ssl: IMAGE-SSL\n", "opt\n", "done\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the output", want)
		}
	}
	for _, bad := range []string{"WROTE", "CHMOD", "REMOVED", "image-passwd"} {
		if strings.Contains(out, bad) {
			t.Errorf("%q in the output: the system root is not read-only, or overrode the jail's own /etc", bad)
		}
	}
	if fileExists(filepath.Join(root, "usr", "bin", "new")) {
		t.Error("a write in the sandbox reached the system root")
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A system root is an image's, so hostile: no symlink in it, absolute or
// climbing out with "..", at a top-level dir or on the way to an /etc
// entry, makes the jail bind a host path. The host's secret is
// world-readable, so only the jail keeps it out; the control case, the same
// file inside the root, shows the probe would see it. Both ways the child
// gets the root: a detached clone (root gateway) and by path (unprivileged).
func TestSystemRootSymlinksStayInside(t *testing.T) {
	t.Parallel()
	// Not under /tmp, where the sandbox's root is built: a link followed
	// there would find nothing, attack or not.
	secret, err := os.MkdirTemp("/var/tmp", "sandgate-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(secret) })
	must(t, os.Chmod(secret, 0o755), os.MkdirAll(filepath.Join(secret, "etc", "ssl"), 0o755),
		os.WriteFile(filepath.Join(secret, "etc", "ssl", "mark"), []byte("HOST-SECRET"), 0o644))
	// Climbing out of the root (the child's view of it is a mount on /tmp)
	// to the host's /, then down to the secret.
	up := strings.Repeat("../", 12) + secret[1:]
	for _, tc := range []struct {
		name  string
		links map[string]string // root-relative path -> symlink target
		dirs  []string
		want  string // in the output besides the probe's
	}{
		{name: "control", dirs: []string{"etc/ssl"}, want: "mark: INSIDE"},
		{name: "etc absolute", links: map[string]string{"etc": filepath.Join(secret, "etc")}},
		{name: "etc climbing", links: map[string]string{"etc": up + "/etc"}},
		{name: "etc one up", links: map[string]string{"etc": "../" + secret[1:] + "/etc"}},
		{name: "etc entry absolute", dirs: []string{"etc"}, links: map[string]string{"etc/ssl": filepath.Join(secret, "etc", "ssl")},
			want: "etc/ssl: " + filepath.Join(secret, "etc", "ssl")},
		{name: "etc entry climbing", dirs: []string{"etc"}, links: map[string]string{"etc/ssl": up + "/etc/ssl"},
			want: "etc/ssl: " + up + "/etc/ssl"},
		{name: "top dir absolute", links: map[string]string{"lib": secret, "usr": "/"},
			want: "lib: " + secret},
		{name: "top dir climbing", links: map[string]string{"lib": up, "lib64": "../../../.."},
			want: "lib: " + up},
	} {
		for _, unprivileged := range []bool{false, true} {
			name := "root gateway/" + tc.name
			if unprivileged {
				name = "unprivileged gateway/" + tc.name
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				hostileRoot(t, tc.dirs, tc.links, tc.name == "control", secret, tc.want, unprivileged)
			})
		}
	}
}

// hostileRoot makes a busybox root with dirs and links (and the control's
// own mark) and checks that the secret's content is nowhere in the sandbox
// and want is in its output.
func hostileRoot(t *testing.T, dirs []string, links map[string]string, control bool, secret, want string, unprivileged bool) {
	t.Helper()
	root := busyboxRoot(t, "bin")
	for _, d := range dirs {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	if control {
		must(t, os.WriteFile(filepath.Join(root, "etc", "ssl", "mark"), []byte("INSIDE"), 0o644))
	}
	for link, target := range links {
		must(t, os.Symlink(target, filepath.Join(root, link)))
	}
	// Every path the secret could show up at, through each link.
	out, err := runSystemRoot(t, root, `
		for f in /etc/ssl/mark /lib/etc/ssl/mark /lib64/`+secret[1:]+`/etc/ssl/mark /usr/`+secret[1:]+`/etc/ssl/mark \
			`+secret+`/etc/ssl/mark; do
			cat $f 2>/dev/null && echo
		done
		echo "mark: $(cat /etc/ssl/mark 2>/dev/null)"
		echo "etc/ssl: $(readlink /etc/ssl)"
		echo "lib: $(readlink /lib)"
		echo done`, unprivileged)
	if err != nil {
		t.Fatalf("jail: %v\n%s", err, out)
	}
	if strings.Contains(out, "HOST-SECRET") {
		t.Fatalf("the host's file is readable in the sandbox:\n%s", out)
	}
	if !strings.Contains(out, "done\n") || !strings.Contains(out, want) {
		t.Fatalf("want %q in the output:\n%s", want, out)
	}
}
