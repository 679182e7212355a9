package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Own makes dir, and everything under it when dir is not already theirs,
// belong to uid:gid: the writable mounts of a sandbox whose host uid is its
// own. A dir that already belongs to them is left as is, so a thread's
// files are walked once, not on every create.
//
// The tree is its tenant's, so the walk never goes by path: each entry is
// reached from its parent directory's descriptor without following a
// symlink (fchownat AT_SYMLINK_NOFOLLOW, openat O_NOFOLLOW), and a
// directory swapped for a symlink mid-walk is skipped, never followed out
// of the tree.
func Own(dir string, uid, gid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("own %s: %w", filepath.Base(dir), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("own %s: %w", filepath.Base(dir), err)
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		unix.Close(fd)
		return nil
	}
	if err := ownTree(fd, uid, gid); err != nil {
		return fmt.Errorf("own %s: %w", filepath.Base(dir), err)
	}
	return nil
}

// ownTree chowns the directory open at fd (which it closes) and all under it.
func ownTree(fd, uid, gid int) error {
	d := os.NewFile(uintptr(fd), "dir")
	defer d.Close()
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			child, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				continue // changed under the walk: not followed
			}
			if err != nil {
				return err
			}
			if err := ownTree(child, uid, gid); err != nil {
				return err
			}
			continue
		}
		if err == nil {
			err = unix.Fchownat(fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}

// Start starts the child and, after Placed, hands it the spec. The caller
// waits for the returned command.
func (c *Command) Start() (*exec.Cmd, error) {
	spec := c.Spec
	spec.Files = len(c.Files)
	spec.ClearGroups = os.Geteuid() == 0
	spec.Mounts = slices.Clone(spec.Mounts)
	uid, gid, resolved := c.UID, c.GID, c.IDs == nil
	resolve := func() (err error) {
		if !resolved {
			uid, gid, err = c.IDs()
			resolved = err == nil
		}
		return err
	}
	trees, err := detach(spec.Mounts, FirstFile+len(c.Files))
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(trees) }()
	if spec.SystemRoot != "" {
		// Detached like a mount: the child's host uid may not reach it.
		sys := []Mount{{Target: "/", Source: spec.SystemRoot}}
		tree, err := detach(sys, FirstFile+len(c.Files)+len(trees))
		if err != nil {
			return nil, fmt.Errorf("system root: %w", err)
		}
		trees, spec.SystemRootFD = append(trees, tree...), sys[0].FD
		if spec.Layer != "" {
			if len(tree) == 0 {
				return nil, errors.New("image layer: may not clone mounts")
			}
			if err := resolve(); err != nil {
				return nil, err
			}
			layer, err := prepareLayer(&spec, tree[0], c.Binary, uid, gid, FirstFile+len(c.Files)+len(trees))
			if err != nil {
				return nil, err
			}
			trees = append(trees, layer)
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox spec: %w", err)
	}
	// The child runs the binary through a descriptor: as its unprivileged
	// host uid it may not traverse the dirs above it (a test's 0700 temp
	// dir, /root).
	bin, err := os.Open(c.Binary)
	if err != nil {
		return nil, fmt.Errorf("open sandbox binary: %w", err)
	}
	defer bin.Close()
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox spec pipe: %w", err)
	}
	defer specR.Close()
	extra := append(append([]*os.File{specR}, c.Files...), trees...)
	cmd := exec.Command(fmt.Sprintf("/proc/self/fd/%d", 3+len(extra)), InitCommand)
	cmd.Args[0] = "sandgate" // what the sandbox's ps shows: not a host path
	// One P, for good (Setup keeps it): the Go runtime then starts fewer
	// threads, each all-threads syscall (earlydrop's 44 at start-up,
	// lockDown's few) signals every thread in turn, and an idle sandbox
	// holds fewer of the host's pids. Setup clears the environment, so
	// the sandbox's commands do not inherit it.
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.Stdout, cmd.Stderr = c.Output, c.Output
	cmd.ExtraFiles = append(extra, bin)
	cmd.SysProcAttr = sysProcAttr(c.Spec.HostNetwork, spec.LayerFD != 0)
	if err := cmd.Start(); err != nil {
		_ = specW.Close()
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	// Placed starts at once, beside the rest (a cgroup v1 attach waits for
	// an RCU grace period: milliseconds, tens of them on a busy machine),
	// while the child starts and builds its root; placedMark then lets it
	// go on. The id maps come first (the child takes its ids once it has
	// read the spec), then the spec, which fits the pipe's buffer (64 KiB)
	// unless a huge environment was configured; then the write waits for
	// the child.
	placed := make(chan error, 1)
	go func() {
		if c.Placed == nil {
			placed <- nil
			return
		}
		placed <- c.Placed(cmd.Process.Pid)
	}()
	err = resolve()
	if err == nil {
		err = mapIDs(cmd.Process.Pid, uid, gid)
	}
	if err == nil {
		_, err = specW.Write(body)
	}
	if err = errors.Join(err, <-placed); err == nil {
		_, err = specW.WriteString(placedMark)
	}
	if err = errors.Join(err, specW.Close()); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("hand over sandbox spec: %w", err)
	}
	return cmd, nil
}

// sysProcAttr puts the child in new namespaces with the capabilities it
// needs to take its ids and build its root (in its own user namespace
// only, dropped before the server starts).
//
// The clone is a vfork (CLONE_VM|CLONE_VFORK), as Go does for any child
// without a new user namespace: with one, Go copies the whole gateway
// instead (page tables, then a copy-on-write fault for every page either
// side touches until the exec), to write the id maps while the child
// waits; that cost milliseconds per sandbox, growing with the gateway's
// memory. So the child is started without maps and execs as an unmapped
// user (ambient capabilities carry over), the gateway writes its maps once
// the exec is done (mapIDs), and the child takes SandboxUID and SandboxGID
// itself once it has read the spec (setIDs), before it does anything else.
//
// A writable image layer needs CAP_DAC_OVERRIDE too: the overlay makes its
// work dir mode 0 and works in it with its mounter's credentials. Like the
// others it holds only in the sandbox's user namespace, where the sandbox's
// own host uid is the only one mapped, so it reaches no file of another.
func sysProcAttr(hostNetwork, layer bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | // the cgroup namespace comes once placed: cgroupNamespace
			syscall.CLONE_VM | syscall.CLONE_VFORK,
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP, unix.CAP_SETUID, unix.CAP_SETGID},
		// Its own process group: terminal signals to the gateway do not
		// reach it, and it outlives the gateway.
		Setpgid: true,
	}
	if hostNetwork {
		attr.Cloneflags &^= syscall.CLONE_NEWNET
	}
	if layer {
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_DAC_OVERRIDE)
	}
	return attr
}

// mapIDs maps SandboxUID and SandboxGID of the child's user namespace to
// uid and gid on the host. Root may let the child clear the gateway's
// supplementary groups (Spec.ClearGroups); for anyone else setgroups stays
// denied (the kernel's rule for an unprivileged map), and the gateway
// user's groups, unmapped, read as nobody.
func mapIDs(pid, uid, gid int) error {
	proc := "/proc/" + strconv.Itoa(pid) + "/"
	var writes [][2]string
	if os.Geteuid() != 0 {
		writes = append(writes, [2]string{"setgroups", "deny"})
	}
	writes = append(writes,
		[2]string{"gid_map", fmt.Sprintf("%d %d 1", SandboxGID, gid)},
		[2]string{"uid_map", fmt.Sprintf("%d %d 1", SandboxUID, uid)})
	for _, w := range writes {
		if err := os.WriteFile(proc+w[0], []byte(w[1]), 0); err != nil {
			return fmt.Errorf("sandbox id map: %w", err)
		}
	}
	return nil
}

// detach clones each mount's source as a detached mount tree (open_tree),
// numbering their fds in the child from first on. A detached tree lets the
// child mount a path its unprivileged host uid could not even reach (a
// data dir under /root). Where the gateway may not clone mounts (it is not
// root), the child binds the source path itself.
func detach(mounts []Mount, first int) ([]*os.File, error) {
	var trees []*os.File
	for i := range mounts {
		m := &mounts[i]
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.EPERM) {
			continue
		}
		if err != nil {
			closeAll(trees)
			return nil, fmt.Errorf("mount %s: %w", m.Target, err)
		}
		trees = append(trees, os.NewFile(uintptr(fd), m.Target))
		m.FD, m.Source = first+len(trees)-1, ""
	}
	return trees, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
