package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// A sandbox's socket may sit in a directory the sandbox writes (the docker
// backend's API socket: the server in the container creates it), so the
// gateway never dials it by path: a sandbox could have put a symlink there
// to any socket on the host (the Docker Engine's), and the gateway would
// carry its tenant's requests there with its own privileges. Instead the
// socket's directory is opened without following a symlink, the name is
// opened in it as an O_PATH descriptor without following one either
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), it must be a socket, and
// the connection goes through /proc/self/fd/N, which is that very inode.
// The listener on the far end is checked too (SO_PEERCRED): its uid is the
// socket file's owner, so a socket made by one uid never leads to a daemon
// of another.

// ErrUnsafeSocket is the dial's answer for a socket path that is not a
// plain socket its listener made: a symlink, another kind of file, or a
// listener of another uid.
var ErrUnsafeSocket = errors.New("sandbox socket refused")

// openSocket opens the socket file at path as an O_PATH descriptor without
// following a symlink at any step below its directory, and returns it with
// its owner.
func openSocket(path string) (*os.File, uint32, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	if base == "" || base == "." || base == ".." {
		return nil, 0, fmt.Errorf("%w: bad socket name", ErrUnsafeSocket)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("sandbox socket dir: %w", err)
	}
	defer unix.Close(dfd)
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(dfd, base, &how)
	if errors.Is(err, unix.ENOSYS) { // before Linux 5.6: base is one component, O_NOFOLLOW covers it
		fd, err = unix.Openat(dfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, 0, fmt.Errorf("%w: a symlink", ErrUnsafeSocket)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sandbox socket: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("sandbox socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		what := "not a socket"
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			what = "a symlink"
		}
		return nil, 0, fmt.Errorf("%w: %s", ErrUnsafeSocket, what)
	}
	return os.NewFile(uintptr(fd), path), st.Uid, nil
}

// DialSocket connects to the Unix socket at path as described above; wantUID
// >= 0 also requires that uid of the listener (and so of the socket's owner).
func DialSocket(ctx context.Context, d *net.Dialer, path string, wantUID int) (net.Conn, error) {
	f, owner, err := openSocket(path)
	if err != nil {
		return nil, notDialled(err)
	}
	defer f.Close()
	if wantUID >= 0 && owner != uint32(wantUID) {
		return nil, fmt.Errorf("%w: owned by uid %d, want %d", ErrUnsafeSocket, owner, wantUID)
	}
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
	if err != nil {
		return nil, err
	}
	uid, err := peerUID(c)
	if err == nil && uid != owner {
		err = fmt.Errorf("%w: listener uid %d, socket owner %d", ErrUnsafeSocket, uid, owner)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// peerUID is the uid of the process that listens on c's far end.
func peerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("%w: not a Unix connection", ErrUnsafeSocket)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("sandbox socket peer: %w", credErr)
	}
	return cred.Uid, nil
}

// OwnDir opens dir for the gateway to make files in: not a symlink, owned by
// the gateway's uid and writable by nobody else, so no sandbox can swap an
// entry of it. Files in it are then reached through /proc/self/fd/N/name
// (also short enough for a socket address however deep dir is).
func OwnDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: its directory is not the gateway's alone (uid %d, mode %o)", ErrUnsafeSocket, st.Uid, st.Mode&0o7777)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// ListenSocket listens on a Unix socket named name in dir (from OwnDir),
// replacing a stale socket of that name, and gives it mode (0 = as the
// umask made it) through a descriptor of the socket file itself, never by
// path. The listener leaves the file when closed.
func ListenSocket(dir *os.File, name string, mode os.FileMode) (*net.UnixListener, error) {
	dfd := int(dir.Fd())
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return nil, fmt.Errorf("socket: %w", err)
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return nil, fmt.Errorf("%w: %s exists and is not a socket", ErrUnsafeSocket, name)
	default:
		if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	bind := "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + name
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bind, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	if mode != 0 {
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			// chmod through the O_PATH descriptor's magic link: that inode.
			err = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), uint32(mode.Perm()))
			unix.Close(fd)
		}
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("socket mode: %w", err)
		}
	}
	return ln, nil
}

// RemoveSocket unlinks name in dir (from OwnDir) if it is a socket.
func RemoveSocket(dir *os.File, name string) {
	var st unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
	}
}
