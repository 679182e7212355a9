package jail

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The writable layer (Spec.Layer) is an overlay the sandbox mounts in its
// own mount namespace: the system root, idmapped, as its lower layer, and
// Layer's upper/ and work/ dirs, the sandbox's own, as the upper. The
// store's files belong to the gateway's uid on disk, which the sandbox's
// user namespace does not map: idmapping the lower shows them as the
// sandbox host uid's, so copy-up (which keeps a file's owner) works and the
// sandbox may change any image file, in its upper layer only.

// Layer dirs, beneath Spec.Layer.
const (
	layerUpper = "upper"
	layerWork  = "work"
)

// prepareLayer makes spec.Layer's upper and work dirs (uid:gid's, 0700:
// nobody else's business), detaches it for the child as spec.LayerFD
// (numbered first), and idmaps sysTree, the detached clone of the system
// root, so that the root dir's owner on disk reads as uid:gid (bin, the
// sandbox binary, makes the namespace for it). Only root may idmap a mount.
func prepareLayer(spec *Spec, sysTree *os.File, bin string, uid, gid, first int) (*os.File, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("image layer: needs a root gateway (idmapped mounts)")
	}
	for _, d := range []string{layerUpper, layerWork} {
		if err := os.MkdirAll(filepath.Join(spec.Layer, d), 0o700); err != nil {
			return nil, fmt.Errorf("image layer: %w", pathless(err))
		}
	}
	if err := Own(spec.Layer, uid, gid); err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(sysTree.Fd()), &st); err != nil {
		return nil, fmt.Errorf("image layer: stat system root: %w", err)
	}
	if err := idmap(sysTree, bin, int(st.Uid), int(st.Gid), uid, gid); err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	layer := []Mount{{Target: "/", Source: spec.Layer}}
	trees, err := detach(layer, first)
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	if len(trees) == 0 {
		return nil, errors.New("image layer: may not clone mounts")
	}
	spec.LayerFD = layer[0].FD
	return trees[0], nil
}

// pathless is err without the host path the os package puts in it.
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// idmap makes the detached tree show files owned by fromUID:fromGID on disk
// as toUID:toGID, read-only, without setuid or devices. Ids other than
// those read as the overflow id (nobody) and cannot be copied up.
func idmap(tree *os.File, bin string, fromUID, fromGID, toUID, toGID int) error {
	ns, err := idmapUserns(bin, fromUID, fromGID, toUID, toGID)
	if err != nil {
		return fmt.Errorf("idmap user namespace: %w", err)
	}
	defer ns.Close()
	err = unix.MountSetattr(int(tree.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | readOnly,
		Userns_fd: uint64(ns.Fd()),
	})
	if err != nil {
		return fmt.Errorf("idmap system root: %w", err)
	}
	return nil
}

// idmapUserns returns a user namespace whose maps take fromUID and fromGID
// to toUID and toGID: what an idmapped mount is made with. A namespace is
// made by a process: bin (the sandbox binary) started as InitCommand in a
// new user namespace, the way a sandbox starts (a vfork, so its cost does
// not grow with the gateway's memory as a fork's page-table copy does),
// which blocks reading a spec that never comes while its maps are written
// and its namespace opened, and is then killed.
func idmapUserns(bin string, fromUID, fromGID, toUID, toGID int) (*os.File, error) {
	exe, err := os.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("open sandbox binary: %w", pathless(err))
	}
	defer exe.Close()
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer specR.Close()
	defer specW.Close()
	cmd := exec.Command("/proc/self/fd/4", InitCommand)
	cmd.Args[0] = "sandgate"
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.ExtraFiles = []*os.File{specR, exe} // fd 3: the spec it waits for
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_VM | syscall.CLONE_VFORK,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	defer func() {
		// Killed now, reaped aside: nothing waits for its exit.
		_ = cmd.Process.Kill()
		go func() { _ = cmd.Wait() }()
	}()
	proc := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/"
	for _, w := range [][2]string{
		{"uid_map", fmt.Sprintf("%d %d 1", fromUID, toUID)},
		{"gid_map", fmt.Sprintf("%d %d 1", fromGID, toGID)},
	} {
		if err := os.WriteFile(proc+w[0], []byte(w[1]), 0); err != nil {
			return nil, fmt.Errorf("write %s: %w", w[0], pathless(err))
		}
	}
	ns, err := os.Open(proc + "ns/user")
	if err != nil {
		return nil, fmt.Errorf("open namespace: %w", pathless(err))
	}
	return ns, nil
}

// overlayRoot mounts the writable layer over the system root open at lower
// (attached on newRoot by openSystemRoot) and returns its root, which
// replaces lower for systemDirs and etc: the layer tree is attached on
// newRoot too, the overlay on top, all under the root's tmpfs and dropped
// with the host's mounts at the pivot. The overlay is nosuid and nodev:
// a file the sandbox marks setuid or a device node in its upper layer
// gives nothing. userxattr: the overlay's own bookkeeping goes in user.*
// xattrs, the only ones an unprivileged mounter may set.
func overlayRoot(spec *Spec, lower int) (int, error) {
	err := unix.MoveMount(spec.LayerFD, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH)
	_ = unix.Close(spec.LayerFD)
	if err != nil {
		return -1, fmt.Errorf("attach layer: %w", err)
	}
	layer, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open layer: %w", err)
	}
	defer unix.Close(layer)
	fd := func(n int) string { return "/proc/self/fd/" + strconv.Itoa(n) }
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s/%s,workdir=%s/%s,userxattr",
		fd(lower), fd(layer), layerUpper, fd(layer), layerWork)
	if err := unix.Mount("overlay", newRoot, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return -1, fmt.Errorf("mount overlay: %w", err)
	}
	return unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}
