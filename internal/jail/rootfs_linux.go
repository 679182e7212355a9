package jail

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// hostEtc lists what of the host's /etc (or a system root's) a sandbox
// sees, read-only: what shells, the dynamic linker, TLS, time zones and
// Debian's alternatives need. Nothing else: an operator's config under
// /etc (the gateway's own among it) may hold secrets a world-readable mode
// exposes.
var hostEtc = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "environment", "fonts",
	"gai.conf", "host.conf", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias",
	"locale.gen", "localtime", "magic", "mime.types", "nsswitch.conf", "profile", "profile.d",
	"protocols", "python3", "services", "ssl", "terminfo", "timezone",
}

// hostname is every sandbox's host name (its UTS namespace's).
const hostname = "sandbox"

// sandboxEtc are the files every sandbox gets of its own: its one user and
// group, its host name and loopback-only name resolution.
var sandboxEtc = map[string]string{
	"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\n"+
		"sandbox:x:%d:%d:sandbox:/mnt/user-data/workspace:/bin/sh\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", SandboxUID, SandboxGID),
	"group":       fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", SandboxGID),
	"hosts":       "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"resolv.conf": "# no network: this sandbox has loopback only\n",
	"hostname":    hostname + "\n",
}

// etc makes the sandbox's /etc: its own files, and the hostEtc entries of
// the host's or a system root's (from) /etc.
func etc(from int) error {
	if err := os.MkdirAll(inRoot("/etc"), 0o755); err != nil {
		return err
	}
	for name, body := range sandboxEtc {
		if err := os.WriteFile(inRoot("/etc/"+name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, name := range hostEtc {
		if err := bind(from, "/etc/"+name, readOnly); err != nil {
			return err
		}
	}
	return nil
}

// devices is a minimal /dev: the harmless character devices bound from the
// host, a pty instance of the sandbox's own (the terminal API), a private
// /dev/shm and the usual links.
func devices(host int) error {
	if err := tmpfs("/dev", 0o755, 1<<20); err != nil {
		return err
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := bind(host, "/dev/"+name, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	for link, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	} {
		if err := os.Symlink(target, inRoot("/dev/"+link)); err != nil {
			return err
		}
	}
	if err := mountAt("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	return tmpfs("/dev/shm", 0o1777, 64<<20)
}
