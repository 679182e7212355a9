//go:build !linux

package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// Without Linux's O_PATH and /proc/self/fd (macOS runs only the
// applecontainer and remote backends, whose sandboxes own no directory of
// the gateway's) the same checks are made by path: weaker against a race,
// and no backend there gives a sandbox such a directory.

// ErrUnsafeSocket is the dial's answer for a socket path that is not a
// plain socket.
var ErrUnsafeSocket = errors.New("sandbox socket refused")

// DialSocket dials the socket at path if it is a socket, not a symlink.
func DialSocket(ctx context.Context, d *net.Dialer, path string, wantUID int) (net.Conn, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, notDialled(fmt.Errorf("sandbox socket: %w", err))
	}
	if fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("%w: not a socket", ErrUnsafeSocket)
	}
	if wantUID >= 0 {
		return nil, fmt.Errorf("%w: no peer check on this system", ErrUnsafeSocket)
	}
	return d.DialContext(ctx, "unix", path)
}

// OwnDir opens dir for the gateway to make sockets in.
func OwnDir(dir string) (*os.File, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: its directory is not the gateway's alone", ErrUnsafeSocket)
	}
	return os.Open(dir)
}

// ListenSocket listens on name in dir, replacing a stale socket.
func ListenSocket(dir *os.File, name string, mode os.FileMode) (*net.UnixListener, error) {
	path := filepath.Join(dir.Name(), name)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%w: %s exists and is not a socket", ErrUnsafeSocket, name)
		}
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	if mode != 0 {
		if err := os.Chmod(path, mode.Perm()); err != nil {
			ln.Close()
			return nil, fmt.Errorf("socket mode: %w", err)
		}
	}
	return ln, nil
}

// RemoveSocket unlinks name in dir if it is a socket.
func RemoveSocket(dir *os.File, name string) {
	path := filepath.Join(dir.Name(), name)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
		_ = os.Remove(path)
	}
}
