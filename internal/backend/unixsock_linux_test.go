package backend

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer listens on a Unix socket at path and counts the
// connections it accepts.
func countingServer(t *testing.T, path string) *atomic.Int32 {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return &n
}

// The one dial every backend uses refuses what a sandbox could leave in a
// socket directory it writes: a symlink to another socket (the Docker
// Engine's, here a test server), a file that is not a socket, and a socket
// whose listener is not its owner or not the uid asked for; the target
// server never sees a connection.
func TestDialSocketRefuses(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	target := filepath.Join(outside, "daemon.sock")
	hits := countingServer(t, target)

	tenant := t.TempDir() // the directory a sandbox writes
	link := filepath.Join(tenant, "api-link.sock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(tenant, "via")
	if err := os.Symlink(outside, dirLink); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(tenant, "api-file.sock")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(tenant, "api-dir.sock")
	if err := os.Mkdir(fifo, 0o700); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(tenant, "api-own.sock")
	countingServer(t, own)

	cases := []struct {
		name, path string
		uid        int
		want       string
	}{
		{"symlink to another socket", link, -1, "a symlink"},
		{"socket through a symlinked dir", filepath.Join(dirLink, "daemon.sock"), -1, "sandbox socket dir"},
		{"regular file", plain, -1, "not a socket"},
		{"directory", fifo, -1, "not a socket"},
		{"another uid than asked for", own, os.Geteuid() + 1, "owned by uid"},
	}
	if os.Geteuid() == 0 {
		// A socket file handed to another uid than its listener's.
		chowned := filepath.Join(tenant, "api-chowned.sock")
		countingServer(t, chowned)
		if err := os.Lchown(chowned, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path string
			uid        int
			want       string
		}{"listener is not the owner", chowned, -1, "listener uid 0, socket owner 65534"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err := DialSocket(ctx, &net.Dialer{}, tc.path, tc.uid)
			if err == nil {
				c.Close()
				t.Fatalf("dialled %s", tc.name)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if tc.want != "sandbox socket dir" && !errors.Is(err, ErrUnsafeSocket) {
				t.Fatalf("err = %v, want ErrUnsafeSocket", err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the server behind the symlink saw %d connections, want 0", n)
	}
	// The control: the sandbox's own socket, of its own uid, is dialled.
	c, err := DialSocket(context.Background(), &net.Dialer{}, own, os.Geteuid())
	if err != nil {
		t.Fatalf("own socket: %v", err)
	}
	c.Close()
}

// ListenSocket refuses a directory others can write, and gives the socket
// its mode through the socket's own descriptor.
func TestListenSocketOwnDir(t *testing.T) {
	t.Parallel()
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if d, err := OwnDir(open); err == nil {
		d.Close()
		t.Fatal("a world-writable dir was taken as the gateway's own")
	}
	dir := t.TempDir()
	d, err := OwnDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.WriteFile(filepath.Join(dir, "x.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenSocket(d, "x.sock", 0o666); !errors.Is(err, ErrUnsafeSocket) {
		t.Fatalf("listen over a regular file: %v", err)
	}
	ln, err := ListenSocket(d, "y.sock", 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Lstat(filepath.Join(dir, "y.sock"))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket: %v %v", fi.Mode(), err)
	}
	RemoveSocket(d, "y.sock")
	if _, err := os.Lstat(filepath.Join(dir, "y.sock")); !os.IsNotExist(err) {
		t.Fatalf("socket not removed: %v", err)
	}
}
