package jail

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/testutil"
)

// layerRoot is a busybox system root shaped like an image: merged /usr,
// /usr/local/bin, a site-packages dir and a data file, all the gateway's
// (root's) on disk, as the image store leaves them.
func layerRoot(t *testing.T) string {
	t.Helper()
	root := busyboxRoot(t, "usr/bin")
	must(t, os.Symlink("usr/bin", filepath.Join(root, "bin")),
		os.MkdirAll(filepath.Join(root, "usr", "local", "bin"), 0o755),
		os.MkdirAll(filepath.Join(root, "usr", "lib", "python3", "dist-packages"), 0o755),
		os.MkdirAll(filepath.Join(root, "usr", "share"), 0o755),
		os.WriteFile(filepath.Join(root, "usr", "share", "data"), []byte("IMAGE-DATA\n"), 0o644))
	return root
}

// runLayered runs script in a jail over root with layer as its writable
// layer, started by this (root) process, and returns the output.
func runLayered(t *testing.T, root, layer, script string) string {
	t.Helper()
	requireJail(t)
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	c := systemRootCommand(jailedBinary(t), root, script, sandboxUID(), log)
	c.Spec.Layer = layer
	cmd, err := c.Start()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
	}
	out, _ := os.ReadFile(log.Name())
	if err != nil {
		t.Fatalf("jail: %v\n%s", err, out)
	}
	return string(out)
}

// newLayerDir is a fresh layer dir in a dir only root may enter, as the
// process backend keeps them (beneath the thread's data dir).
func newLayerDir(t *testing.T) string {
	t.Helper()
	jailedBinary(t)
	dir, err := os.MkdirTemp(testBinDir, "layer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o700))
	return filepath.Join(dir, "layer")
}

// A sandbox writes into the image's dirs (a new program in /usr/local/bin,
// an image file changed, a package in site-packages, an image program
// removed) and reads it back; the image's files are its own uid's. The
// store on disk is unchanged, a sandbox on another layer sees the image
// as it was, and one on the same layer dir sees the writes again (the
// layer is all that holds them: the backend removes it on destroy).
func TestLayerWritesStayInSandbox(t *testing.T) {
	t.Parallel()
	root := layerRoot(t)
	before := testutil.TreeSum(t, root)
	layer := newLayerDir(t)
	const write = `
		set -e
		echo "owner: $(stat -c %u:%g /usr/bin/busybox /usr/share/data | tr '\n' ' ')"
		printf '#!/bin/sh\necho TOOL-RAN\n' >/usr/local/bin/tool && chmod 755 /usr/local/bin/tool
		/usr/local/bin/tool
		echo SANDBOX-EDIT >>/usr/share/data
		mkdir /usr/lib/python3/dist-packages/pkg
		echo 'MARK = 1' >/usr/lib/python3/dist-packages/pkg/__init__.py
		rm /usr/bin/ls
		echo "data: $(cat /usr/share/data | tr '\n' ' ')"
		echo "pkg: $(cat /usr/lib/python3/dist-packages/pkg/__init__.py)"
		test ! -e /usr/bin/ls && echo "ls removed"
		echo done`
	out := runLayered(t, root, layer, write)
	t.Logf("%s", out)
	for _, want := range []string{"owner: 1000:1000 1000:1000 \n", "TOOL-RAN\n", "data: IMAGE-DATA SANDBOX-EDIT \n",
		"pkg: MARK = 1\n", "ls removed\n", "done\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the output", want)
		}
	}
	if after := testutil.TreeSum(t, root); after != before {
		t.Errorf("the store changed on disk:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if fi, err := os.Stat(filepath.Join(layer, layerUpper, "usr", "local", "bin", "tool")); err != nil || fi.Size() == 0 {
		t.Errorf("the new program is not in the layer's upper dir: %v", err)
	}

	const look = `
		test -e /usr/local/bin/tool && echo "SEES tool"
		echo "data: $(cat /usr/share/data | tr '\n' ' ')"
		test -e /usr/lib/python3/dist-packages/pkg && echo "SEES pkg"
		test -e /usr/bin/ls && echo "ls present"
		echo done`
	other := runLayered(t, root, newLayerDir(t), look)
	if strings.Contains(other, "SEES") || !strings.Contains(other, "data: IMAGE-DATA \n") || !strings.Contains(other, "ls present\n") {
		t.Errorf("a sandbox on another layer sees the first one's writes:\n%s", other)
	}
	again := runLayered(t, root, layer, look)
	if !strings.Contains(again, "SEES tool\n") || !strings.Contains(again, "data: IMAGE-DATA SANDBOX-EDIT \n") {
		t.Errorf("the same layer dir does not hold the writes:\n%s", again)
	}
}

// Attacks through the layer: a symlink the sandbox puts in its upper dir
// resolves in the sandbox (a host secret it names stays out); a setuid bit
// or device node gives nothing (the overlay is nosuid and nodev, mknod is
// refused, and no file can be given to root); and no path the sandbox can
// name, those /proc/self/mountinfo shows for the overlay's layers and the
// store's host path among them, writes the store.
func TestLayerAttacks(t *testing.T) {
	t.Parallel()
	secret, err := os.MkdirTemp("/var/tmp", "sandgate-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(secret) })
	must(t, os.Chmod(secret, 0o755), os.WriteFile(filepath.Join(secret, "mark"), []byte("HOST-SECRET"), 0o644))
	root := layerRoot(t)
	before := testutil.TreeSum(t, root)
	layer := newLayerDir(t)
	out := runLayered(t, root, layer, `
		ln -s `+secret+`/mark /usr/local/bin/escape
		ln -s `+strings.Repeat("../", 12)+secret[1:]+`/mark /usr/share/climb
		cat /usr/local/bin/escape /usr/share/climb 2>/dev/null
		cp /usr/bin/busybox /usr/local/bin/suid && chmod 4755 /usr/local/bin/suid
		echo "suid: $(stat -c %a:%u /usr/local/bin/suid)"
		chown 0:0 /usr/local/bin/suid 2>/dev/null && echo "CHOWNED"
		mknod /usr/local/bin/mem c 1 1 2>/dev/null && echo "MKNOD"
		grep ' /usr ' /proc/self/mountinfo | grep -q 'nosuid,nodev' && echo "usr nosuid,nodev"
		for d in $(tr ', ' '\n\n' </proc/self/mountinfo | grep 'dir=' | cut -d= -f2) `+root+` /proc/1/root`+root+`; do
			echo "tried $d"
			for p in $d $d/usr $d/usr/bin $d/upper/usr; do
				(echo x >$p/pwned) 2>/dev/null && echo "WROTE $p"
			done
		done
		echo x >/usr/pwned && echo "own layer written"
		echo done`)
	t.Logf("%s", out)
	for _, bad := range []string{"HOST-SECRET", "CHOWNED", "MKNOD", "WROTE"} {
		if strings.Contains(out, bad) {
			t.Errorf("%q in the output: an attack through the layer worked", bad)
		}
	}
	for _, want := range []string{"suid: 4755:1000\n", "usr nosuid,nodev\n", "tried /proc/self/fd/", "own layer written\n", "done\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the output", want)
		}
	}
	if after := testutil.TreeSum(t, root); after != before {
		t.Errorf("the store changed on disk:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	var st syscall.Stat_t
	must(t, syscall.Lstat(filepath.Join(layer, layerUpper, "usr", "local", "bin", "suid"), &st))
	if st.Uid == 0 || st.Gid == 0 {
		t.Errorf("the sandbox's setuid file is root's on the host: %d:%d", st.Uid, st.Gid)
	}
}

// BenchmarkLayerIdmap is what a writable layer's idmap adds to a cold
// create in the gateway: a user namespace made for it, and the idmap set
// on a detached clone of the system root (which every image sandbox has).
func BenchmarkLayerIdmap(b *testing.B) {
	testutil.Require(b, os.Geteuid() == 0, "root (idmapped mounts)")
	bin := jailedBinary(b)
	root := b.TempDir()
	for range b.N {
		b.StopTimer()
		fd, err := unix.OpenTree(unix.AT_FDCWD, root, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			b.Fatal(err)
		}
		tree := os.NewFile(uintptr(fd), "tree")
		b.StartTimer()
		if err := idmap(tree, bin, 0, 0, 1_600_000, 1_600_000); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		tree.Close()
		b.StartTimer()
	}
}
