package jail

import (
	"strings"
	"testing"
)

// A system root must be a clean absolute path, and with one the image's
// /opt is the sandbox's own like /usr: no mount may shadow it. A writable
// layer needs a system root to lie over, and a clean absolute path.
func TestSpecSystemRoot(t *testing.T) {
	t.Parallel()
	base := Spec{Args: []string{"serve"}, Seccomp: []byte{0}}
	for _, tc := range []struct {
		name   string
		root   string
		layer  string
		target string
		err    string // "" = valid
	}{
		{"host, mount on /opt", "", "", "/opt/tools", ""},
		{"image", "/srv/images/rootfs/sha256/abc", "", "/mnt/user-data/workspace", ""},
		{"image, mount on /opt", "/srv/rootfs", "", "/opt/tools", "/opt is the sandbox's own"},
		{"image, mount on /usr", "/srv/rootfs", "", "/usr/local", "/usr is the sandbox's own"},
		{"relative root", "srv/rootfs", "", "/mnt/x", "system root"},
		{"unclean root", "/srv/../etc", "", "/mnt/x", "system root"},
		{"image with a layer", "/srv/rootfs", "/srv/data/image-layer", "/mnt/x", ""},
		{"layer without an image", "", "/srv/data/image-layer", "/mnt/x", "image layer"},
		{"relative layer", "/srv/rootfs", "data/image-layer", "/mnt/x", "image layer"},
		{"unclean layer", "/srv/rootfs", "/srv/data/../../etc", "/mnt/x", "image layer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := base
			s.SystemRoot, s.Layer = tc.root, tc.layer
			s.Mounts = []Mount{{Target: tc.target, Source: "/srv/data"}}
			err := s.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Validate = %v, want an error with %q", err, tc.err)
			}
		})
	}
}
