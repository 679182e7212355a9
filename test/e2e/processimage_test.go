package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/testutil"
)

// A gateway with process_image runs its isolated process sandboxes on the
// image's userland (the sandbox image: a static busybox, no /usr), not the
// host's: the image's programs and PATH, none of the host's binaries, and
// nothing of it writable.
func TestProcessImage(t *testing.T) {
	t.Parallel()
	const hostOnly = "/usr/bin/perl"
	_, err := os.Stat(hostOnly)
	testutil.Require(t, err == nil, hostOnly+" on the host")
	archive := testutil.SaveImage(t, testutil.SandboxImage(t))
	g := newFleet(t, "--process-image", archive).start()
	if !strings.Contains(g.logs.String(), "process_image imported") {
		t.Errorf("no import in the gateway's log:\n%s", g.logs)
	}

	for _, tc := range []struct {
		name, command string
		want          string // the output, trimmed; "" = any
		fails         bool
	}{
		{"image root", "ls /bin/busybox && test ! -e " + hostOnly + " && echo image-root", "/bin/busybox\nimage-root", false},
		{"image PATH", `echo "$PATH"`, "/usr/local/bin:/usr/bin:/bin", false},
		{"workspace writable", "echo ok > f && cat f", "ok", false},
		{"write /usr", "mkdir -p /usr/local/bin && echo x > /usr/local/bin/evil", "", true},
		{"write /bin", "echo x > /bin/evil", "", true},
		{"replace busybox", "cp /bin/sh /bin/busybox", "", true},
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
