package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// newRoot is where the child builds the sandbox's root before pivoting
// into it: a tmpfs over /tmp of its private copy of the host's mounts.
const newRoot = "/tmp"

// Setup turns this process (InitCommand, PID 1 of the new namespaces) into
// the sandbox: it reads its Spec, builds the root and pivots into it, takes
// the server's environment, working directory and descriptors (the files
// handed over become fds 3, 4, ...), and locks itself down. It returns the
// server's command line for the caller to run in this same process, so a
// sandbox costs one program start; nil after a probe.
func Setup() ([]string, error) {
	// Descriptors inherited from the gateway (the spec pipe, the mount
	// trees) must not reach the sandbox's commands; the server's own are
	// moved into place below, close-on-exec too.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("mark inherited fds: %w", err)
	}
	// Nothing in the sandbox may read this process's memory or environ.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("set non-dumpable: %w", err)
	}
	spec, placed, err := readSpec()
	if err != nil {
		return nil, err
	}
	if err := setIDs(spec.ClearGroups); err != nil {
		return nil, err
	}
	if err := build(&spec); err != nil {
		return nil, err
	}
	if err := placed(); err != nil {
		return nil, err
	}
	if err := cgroupNamespace(); err != nil {
		return nil, err
	}
	if err := takeOver(spec); err != nil {
		return nil, err
	}
	writable := []string{"/tmp", "/dev/shm"}
	for _, m := range spec.Mounts {
		if !m.ReadOnly {
			writable = append(writable, m.Target)
		}
	}
	if spec.LayerFD != 0 {
		for _, top := range systemTops {
			writable = append(writable, "/"+top)
		}
	}
	report, err := lockDown(spec.Limits, spec.MemoryByRlimit, writable, spec.Seccomp)
	if err != nil {
		return nil, fmt.Errorf("lock down: %w", err)
	}
	// Started with GOMAXPROCS=1 (Command.Start), and kept so: one P serves
	// the sandbox's API (its commands are processes of their own, not held
	// to it), and the Go runtime starts fewer threads. Threads count in
	// kernel.pid_max with every other sandbox's: at 2 Ps an idle sandbox
	// ran 7, at 1 it runs fewer (bench density), the first limit on how
	// many sandboxes a host holds.
	fmt.Fprintln(os.Stderr, "sandbox jail:", report) // to the sandbox's log on the host
	if spec.Probe {
		return nil, nil
	}
	return spec.Args, nil
}

// readSpec reads the spec from its pipe, and returns the wait for the
// placedMark that follows it (Command.Start), which closes the pipe.
func readSpec() (Spec, func() error, error) {
	f := os.NewFile(specFD, "spec")
	in := io.LimitReader(f, 1<<20)
	dec := json.NewDecoder(in)
	var spec Spec
	if err := dec.Decode(&spec); err != nil {
		_ = f.Close()
		return Spec{}, nil, fmt.Errorf("decode spec: %w", err)
	}
	placed := func() error {
		defer f.Close()
		rest, err := io.ReadAll(io.MultiReader(dec.Buffered(), in))
		if err != nil {
			return fmt.Errorf("await cgroups: %w", err)
		}
		if string(rest) != placedMark {
			return errors.New("await cgroups: the gateway did not place this sandbox")
		}
		return nil
	}
	spec.Limits = spec.Limits.WithDefaults()
	return spec, placed, spec.Validate()
}

// cgroupNamespace gives the sandbox a cgroup namespace rooted at the cgroup
// the gateway has just placed it in, so /proc/self/cgroup reads "0::/" and
// names no host cgroup path (one made at clone time would be rooted at the
// gateway's cgroup, and show the sandbox's own below it). Every thread
// unshares (psx), as namespaces belong to a thread and a child inherits its
// parent thread's.
func cgroupNamespace() error {
	if _, _, e := psx.Syscall3(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP, 0, 0); e != 0 {
		return fmt.Errorf("cgroup namespace: %w", e)
	}
	return nil
}

// setIDs makes this process SandboxUID and SandboxGID, which the gateway
// mapped before it sent the spec (Command.Start): it started as an
// unmapped user. On every thread (Go's syscall package sees to that), as
// ids, like capabilities, belong to a thread.
func setIDs(clearGroups bool) error {
	if clearGroups {
		if err := syscall.Setgroups([]int{}); err != nil {
			return fmt.Errorf("clear groups: %w", err)
		}
	}
	if err := syscall.Setresgid(SandboxGID, SandboxGID, SandboxGID); err != nil {
		return fmt.Errorf("set gid: %w", err)
	}
	if err := syscall.Setresuid(SandboxUID, SandboxUID, SandboxUID); err != nil {
		return fmt.Errorf("set uid: %w", err)
	}
	return nil
}

// takeOver gives this process the server's environment and working
// directory, and moves the handed-over files down to fds 3, 4, ... (the
// spec pipe, fd 3, is closed by now).
func takeOver(spec Spec) error {
	os.Clearenv()
	for _, kv := range spec.Env {
		name, value, _ := strings.Cut(kv, "=")
		if err := os.Setenv(name, value); err != nil {
			return fmt.Errorf("environment: %w", err)
		}
	}
	if err := os.Chdir(spec.Dir); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	for i := range spec.Files {
		if err := unix.Dup3(FirstFile+i, specFD+i, unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("move server fd: %w", err)
		}
	}
	if spec.Files > 0 {
		_ = unix.Close(FirstFile + spec.Files - 1) // the last one has no slot to be overwritten by
	}
	return nil
}

// build makes the sandbox's root and pivots into it.
func build(spec *Spec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Sources bound by path are opened before the root tmpfs may hide them.
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if m.FD != 0 {
			continue
		}
		fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open mount source of %s: %w", m.Target, err)
		}
		m.FD = fd
	}
	host, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open host root: %w", err)
	}
	defer unix.Close(host)
	system := host
	if spec.SystemRoot != "" {
		if system, err = openSystemRoot(spec); err != nil {
			return fmt.Errorf("open system root: %w", err)
		}
		if spec.LayerFD != 0 {
			lower := system
			system, err = overlayRoot(spec, lower)
			_ = unix.Close(lower)
			if err != nil {
				return fmt.Errorf("image layer: %w", err)
			}
		}
		defer unix.Close(system)
	}
	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"system dirs", func() error { return systemDirs(system, spec.SystemRoot != "", spec.LayerFD != 0) }},
		{"/etc", func() error { return etc(system) }},
		{"/dev", func() error { return devices(host) }},
		{"/tmp", func() error { return tmpfs("/tmp", 0o1777, spec.Limits.TmpSize) }},
		{"mounts", func() error { return bindMounts(spec.Mounts) }},
		// The working directory exists even when no mount provides it.
		{"working directory", func() error { return os.MkdirAll(inRoot(spec.Dir), 0o755) }},
		{"/proc", func() error { return mountAt("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "") }},
		{"pivot", pivot},
		{"hostname", func() error { return unix.Sethostname([]byte(hostname)) }},
		{"loopback", func() error {
			if spec.HostNetwork {
				return nil
			}
			return loopbackUp()
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("sandbox %s: %w", s.what, err)
		}
	}
	return nil
}

// inRoot is a path of the root being built.
func inRoot(p string) string { return filepath.Join(newRoot, p) }

// mountAt mounts inside the new root, creating the mount point.
func mountAt(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(inRoot(target), 0o755); err != nil {
		return err
	}
	return unix.Mount(source, inRoot(target), fstype, flags, data)
}

// tmpfs mounts a tmpfs of size bytes (<= 0: the kernel's default, half
// of RAM) inside the new root.
func tmpfs(target string, mode os.FileMode, size int64) error {
	data := fmt.Sprintf("mode=%o", mode)
	if size > 0 {
		data += fmt.Sprintf(",size=%d", size)
	}
	return mountAt("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data)
}

// setAttr changes mount attributes of a mount and those below it; unlike a
// remount it keeps the flags it does not name, the locked ones included.
func setAttr(path string, attr uint64) error {
	return unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE,
		&unix.MountAttr{Attr_set: attr})
}

const readOnly = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// openSystemRoot opens Spec.SystemRoot in this mount namespace, where a
// bind must come from: a detached clone the parent made is attached on
// newRoot first, where the root's tmpfs covers it and the pivot drops it.
func openSystemRoot(spec *Spec) (int, error) {
	dir := spec.SystemRoot
	if spec.SystemRootFD != 0 {
		err := unix.MoveMount(spec.SystemRootFD, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH)
		_ = unix.Close(spec.SystemRootFD)
		if err != nil {
			return -1, err
		}
		dir = newRoot
	}
	return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// systemDirs binds the program and library dirs of the host or a system
// root (from) read-only, or writable where from is a writable layer's
// overlay, and copies the symlinks a merged-/usr system has in their place.
func systemDirs(from int, image, layered bool) error {
	tops, attr := hostTops, uint64(readOnly)
	if image {
		tops = systemTops
	}
	if layered {
		attr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	}
	for _, name := range tops {
		if err := bind(from, "/"+name, attr); err != nil {
			return err
		}
	}
	return nil
}

// bind binds p beneath the dir open at from (the host's root or a system
// root) to p in the new root. A system root is an image's, so hostile: p is
// resolved beneath from without following a symlink in any component, so
// no symlink there (etc -> /root, lib -> ../../..) reaches the host. A
// symlink at p is recreated with its target text, unresolved; a p that is
// missing, or reached only through a symlink or a non-directory, is
// skipped.
func bind(from int, p string, attr uint64) error {
	fd, err := unix.Openat2(from, p[1:], &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil
	case err != nil:
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return fmt.Errorf("read link %s: %w", p, err)
		}
		return os.Symlink(string(buf[:n]), inRoot(p))
	}
	if err := mountPoint(inRoot(p), st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return err
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), inRoot(p), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	return setAttr(inRoot(p), attr)
}

// mountPoint creates an empty dir or file to mount on.
func mountPoint(p string, dir bool) error {
	if dir {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// bindMounts attaches each mount: a detached tree from the parent, or a
// source this process opened by path.
func bindMounts(mounts []Mount) error {
	for _, m := range mounts {
		var st unix.Stat_t
		if err := unix.Fstat(m.FD, &st); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		target := inRoot(m.Target)
		if err := mountPoint(target, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		var err error
		if m.Source == "" { // a detached tree
			err = unix.MoveMount(m.FD, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH)
		} else {
			err = unix.Mount("/proc/self/fd/"+strconv.Itoa(m.FD), target, "", unix.MS_BIND|unix.MS_REC, "")
		}
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		_ = unix.Close(m.FD)
		attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if m.ReadOnly {
			attr |= unix.MOUNT_ATTR_RDONLY
		}
		if err := setAttr(target, attr); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
	}
	return nil
}

// pivot makes the new root the root, drops the host's mounts and seals the
// root's own tmpfs read-only (its dirs and /etc files are done).
func pivot() error {
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	// The old root is stacked on ".": detaching it leaves the new one.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host mounts: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	return unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
}

// loopbackUp brings up lo, the only interface of the sandbox's network
// namespace: the server's port proxy and the commands' own servers use it.
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}
