package e2e

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/testutil"
)

// A gateway with process_image runs its isolated process sandboxes on the
// image's userland (the sandbox image: a static busybox, no /usr), not the
// host's: the image's programs and PATH, none of the host's binaries. A
// sandbox may change its image (its own writable layer) but no other
// sandbox sees the change, and the stored image is never written.
func TestProcessImage(t *testing.T) {
	t.Parallel()
	const hostOnly = "/usr/bin/perl"
	_, err := os.Stat(hostOnly)
	testutil.Require(t, err == nil, hostOnly+" on the host")
	archive := testutil.SaveImage(t, testutil.SandboxImage(t))
	f := newFleet(t, "--process-image", archive)
	g := f.start()
	if !strings.Contains(g.logs.String(), "process_image imported") {
		t.Errorf("no import in the gateway's log:\n%s", g.logs)
	}
	store := filepath.Join(f.dataDir, "images")
	busybox := storeFiles(t, store, "busybox")

	for _, tc := range []struct {
		name, command string
		want          string // the output, trimmed; "" = any
		fails         bool
	}{
		{"image root", "ls /bin/busybox && test ! -e " + hostOnly + " && echo image-root", "/bin/busybox\nimage-root", false},
		{"image PATH", `echo "$PATH"`, "/usr/local/bin:/usr/bin:/bin", false},
		{"workspace writable", "echo ok > f && cat f", "ok", false},
		// Into the sandbox's own layer over the image.
		{"no new top dir", "mkdir /usr", "", true}, // the image has no /usr, the root stays read-only
		{"write /bin", "echo x > /bin/evil && cat /bin/evil", "x", false},
		{"replace busybox", "echo '#!/bin/sh' > /bin/busybox.new && mv /bin/busybox.new /bin/busybox", "", false},
	} {
		out, code := run(t, g, "imaged", tc.command)
		switch {
		case tc.fails && code == 0:
			t.Errorf("%s: %q succeeded: %s", tc.name, tc.command, out)
		case !tc.fails && code != 0:
			t.Errorf("%s: %q: exit %d: %s", tc.name, tc.command, code, out)
		case tc.want != "" && strings.TrimSpace(out) != tc.want:
			t.Errorf("%s: %q printed %q, want %q", tc.name, tc.command, out, tc.want)
		}
	}
	// Another thread's sandbox runs the same stored image: none of it.
	if out, code := run(t, g, "other", "test ! -e /bin/evil && /bin/busybox true && echo clean"); code != 0 || strings.TrimSpace(out) != "clean" {
		t.Errorf("another thread sees the first one's writes to the image: exit %d: %s", code, out)
	}
	if evil := storeFiles(t, store, "evil"); len(evil) != 0 {
		t.Errorf("a sandbox's write reached the stored image: %v", evil)
	}
	if after := storeFiles(t, store, "busybox"); !maps.Equal(after, busybox) || len(after) == 0 {
		t.Errorf("the stored busybox changed under a sandbox's replace: %v, was %v", after, busybox)
	}
}

// storeFiles maps each file named name under the image store dir to its
// content's hash.
func storeFiles(t *testing.T, dir, name string) map[string]string {
	t.Helper()
	found := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != name || !d.Type().IsRegular() {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found[p] = fmt.Sprintf("%x", sha256.Sum256(body))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// A process_image the gateway cannot use stops it at start, naming the
// setting: not an image archive, or with no jail to run it in.
func TestProcessImageRefused(t *testing.T) {
	t.Parallel()
	notImage := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(notImage, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"not an archive", []string{"--backend", "process", "--process-image", notImage}},
		{"missing", []string{"--backend", "process", "--process-image", filepath.Join(t.TempDir(), "none.tar")}},
		{"no isolation", []string{"--backend", "process", "--process-image", notImage, "--process-isolation", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if out := startFails(t, nil, tc.args...); !strings.Contains(out, "process_image") {
				t.Errorf("refusal does not name process_image:\n%s", tail(out, 20))
			}
		})
	}
}
