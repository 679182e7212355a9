package imagestore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestHostileLayers imports real images whose layers attack the store; the
// sentinel directory outside the store must stay as it was in every case.
func TestHostileLayers(t *testing.T) {
	t.Parallel()
	runHostile(t, func(t *testing.T, s *Store, img v1.Image) (Image, error) {
		return s.ImportArchive(t.Context(), writeArchive(t, img))
	})
}

// hostileCase is an image whose layers attack the store.
type hostileCase struct {
	name string
	// layers builds the image's layers (bottom first) given the
	// outside directory.
	layers func(out string) [][]entry
	cfg    Config
	// wantErr: the import fails with these words and leaves nothing;
	// empty: it succeeds and check looks at the rootfs.
	wantErr []string
	check   func(t *testing.T, img Image, out string)
}

// hostileCases are the attacks every import path must withstand.
var hostileCases = []hostileCase{{
	name: "dot-dot entry name",
	layers: func(string) [][]entry {
		return [][]entry{{file("ok", "x"), file("../escape", "pwned")}}
	},
	wantErr: []string{`"../escape"`, "refused", `".."`},
}, {
	name: "dot-dot inside an entry name",
	layers: func(string) [][]entry {
		return [][]entry{{dir("a/"), file("a/../../escape", "pwned")}}
	},
	wantErr: []string{`"a/../../escape"`, "refused"},
}, {
	name: "absolute entry name",
	layers: func(out string) [][]entry {
		return [][]entry{{file(filepath.Join(out, "sentinel"), "pwned")}}
	},
	wantErr: []string{"sentinel", "refused", "absolute path"},
}, {
	name: "file written through an absolute symlink",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("link", out), file("link/sentinel", "pwned")}}
	},
	wantErr: []string{`"link/sentinel"`},
}, {
	name: "file written through a relative symlink that climbs out",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("link", strings.Repeat("../", 20)+out[1:]), file("link/sentinel", "pwned")}}
	},
	wantErr: []string{`"link/sentinel"`},
}, {
	name: "upper layer writes through a lower layer's symlink",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("etc", out)}, {file("etc/sentinel", "pwned")}}
	},
	wantErr: []string{"layer 1", `"etc/sentinel"`},
}, {
	name: "directory made through a symlink",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("link", out), dir("link/newdir/")}}
	},
	wantErr: []string{`"link/newdir/"`},
}, {
	name: "whiteout through a symlink",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("link", out)}, {file("link/.wh.sentinel", "")}}
	},
	wantErr: []string{"layer 1", `"link/.wh.sentinel"`},
}, {
	name: "opaque directory through a symlink",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("link", out), symlink("rel", "../../../.."+out)}, {
			file("link/.wh..wh..opq", ""), file("rel/.wh..wh..opq", ""),
		}}
	},
	check: func(t *testing.T, img Image, out string) {
		if got := readLink(t, filepath.Join(img.RootFS, "link")); got != out {
			t.Errorf("link -> %q, want %q", got, out)
		}
	},
}, {
	name: "a file replaces a symlink to outside, not its target",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("evil", filepath.Join(out, "sentinel"))}, {file("evil", "pwned")}}
	},
	check: func(t *testing.T, img Image, out string) {
		got, err := os.ReadFile(filepath.Join(img.RootFS, "evil"))
		if err != nil || string(got) != "pwned" {
			t.Errorf("evil = %q, %v; want the upper layer's file", got, err)
		}
	},
}, {
	name: "absolute and dangling symlinks are stored, not followed",
	layers: func(out string) [][]entry {
		return [][]entry{{
			symlink("abs", filepath.Join(out, "sentinel")),
			symlink("dangling", "no/such/file"),
			symlink("absdir", out),
		}}
	},
	check: func(t *testing.T, img Image, out string) {
		for name, want := range map[string]string{
			"abs":      filepath.Join(out, "sentinel"),
			"dangling": "no/such/file",
			"absdir":   out,
		} {
			if got := readLink(t, filepath.Join(img.RootFS, name)); got != want {
				t.Errorf("%s -> %q, want %q", name, got, want)
			}
		}
	},
}, {
	name: "hard link to an absolute path",
	layers: func(string) [][]entry {
		return [][]entry{{hardlink("shadow", "/etc/shadow")}}
	},
	wantErr: []string{`"shadow"`, `"/etc/shadow"`, "absolute path"},
}, {
	name: "hard link to the outside sentinel",
	layers: func(out string) [][]entry {
		return [][]entry{{hardlink("stolen", filepath.Join(out, "sentinel"))}}
	},
	wantErr: []string{`"stolen"`, "absolute path"},
}, {
	name: "hard link climbing out",
	layers: func(string) [][]entry {
		return [][]entry{{hardlink("x", "../x")}}
	},
	wantErr: []string{`"x"`, `"../x"`, "refused"},
}, {
	name: "hard link through a symlinked directory",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("d", out), hardlink("stolen", "d/sentinel")}}
	},
	wantErr: []string{`"stolen"`, "not in the image"},
}, {
	name: "hard link to an entry not extracted",
	layers: func(string) [][]entry {
		return [][]entry{{hardlink("early", "later"), file("later", "x")}}
	},
	wantErr: []string{`"early"`, "not in the image"},
}, {
	name: "hard link to a directory",
	layers: func(string) [][]entry {
		return [][]entry{{dir("d/"), hardlink("h", "d")}}
	},
	wantErr: []string{`"h"`, "directory"},
}, {
	name: "hard link to a symlink to outside is a symlink",
	layers: func(out string) [][]entry {
		return [][]entry{{symlink("s", filepath.Join(out, "sentinel")), hardlink("h", "s")}}
	},
	check: func(t *testing.T, img Image, out string) {
		fi, err := os.Lstat(filepath.Join(img.RootFS, "h"))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("h: %v, %v; want a symlink", fi, err)
		}
	},
}, {
	name: "hard link inside the tree",
	layers: func(string) [][]entry {
		return [][]entry{{file("bin/app", "binary")}, {hardlink("bin/alias", "bin/app")}}
	},
	check: func(t *testing.T, img Image, _ string) {
		a, _ := os.Stat(filepath.Join(img.RootFS, "bin/app"))
		b, _ := os.Stat(filepath.Join(img.RootFS, "bin/alias"))
		if a == nil || b == nil || !os.SameFile(a, b) {
			t.Errorf("bin/alias is not a hard link of bin/app: %v %v", a, b)
		}
	},
}, {
	name: "device nodes and FIFOs are skipped",
	layers: func(string) [][]entry {
		return [][]entry{{
			dir("dev/"),
			{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}},
			{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "dev/sda", Mode: 0o660, Devmajor: 8}},
			{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "fifo", Mode: 0o644}},
			file("kept", "x"),
		}}
	},
	check: func(t *testing.T, img Image, _ string) {
		if img.Skipped != 3 {
			t.Errorf("Skipped = %d, want 3", img.Skipped)
		}
		for _, n := range []string{"dev/null", "dev/sda", "fifo"} {
			if _, err := os.Lstat(filepath.Join(img.RootFS, n)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s exists (%v); special files must be skipped", n, err)
			}
		}
	},
}, {
	name: "setuid, setgid, sticky and ownership are dropped",
	layers: func(string) [][]entry {
		suid := file("bin/su", "x")
		suid.hdr.Mode, suid.hdr.Uid, suid.hdr.Gid = 0o4755, 4242, 4242
		sgid := file("bin/sg", "x")
		sgid.hdr.Mode = 0o2755
		tmp := dir("tmp/")
		tmp.hdr.Mode = 0o1777
		return [][]entry{{suid, sgid, tmp}}
	},
	check: func(t *testing.T, img Image, _ string) {
		for _, n := range []string{"bin/su", "bin/sg", "tmp"} {
			fi, err := os.Lstat(filepath.Join(img.RootFS, n))
			if err != nil {
				t.Fatal(err)
			}
			if m := fi.Mode(); m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 || m&0o022 != 0 {
				t.Errorf("%s mode %v: special or write bits kept", n, m)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
				t.Errorf("%s owned by uid %d, want the store's owner %d", n, st.Uid, os.Getuid())
			}
		}
	},
}, {
	name: "too many tiny files (MaxEntries)",
	cfg:  Config{MaxEntries: 1000},
	layers: func(string) [][]entry {
		var many []entry
		for i := range 1001 {
			many = append(many, file(fmt.Sprintf("f/%d", i), ""))
		}
		return [][]entry{many}
	},
	wantErr: []string{"MaxEntries (1000)"},
}, {
	name: "entries counted across layers (MaxEntries)",
	cfg:  Config{MaxEntries: 3},
	layers: func(string) [][]entry {
		return [][]entry{{file("a", ""), file("b", "")}, {file("c", ""), file("d", "")}}
	},
	wantErr: []string{"layer 1", "MaxEntries (3)"},
}, {
	name: "a file over MaxBytes",
	cfg:  Config{MaxBytes: 1000},
	layers: func(string) [][]entry {
		return [][]entry{{file("big", strings.Repeat("x", 1001))}}
	},
	wantErr: []string{`"big"`, "MaxBytes (1000)"},
}, {
	name: "bytes counted across layers (MaxBytes)",
	cfg:  Config{MaxBytes: 1000},
	layers: func(string) [][]entry {
		return [][]entry{{file("a", strings.Repeat("x", 600))}, {file("b", strings.Repeat("x", 600))}}
	},
	wantErr: []string{"layer 1", "MaxBytes (1000)"},
}}

// runHostile imports each of hostileCases with imp into a store of its own.
func runHostile(t *testing.T, imp func(t *testing.T, s *Store, img v1.Image) (Image, error)) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := sentinel(t)
			var tars [][]byte
			for _, l := range tc.layers(out) {
				tars = append(tars, layerTar(t, l...))
			}
			s := newStore(t, tc.cfg)
			img, err := imp(t, s, buildImage(t, tars...))
			if tc.wantErr != nil {
				mustContain(t, err, tc.wantErr...)
				t.Logf("refused: %v", err)
				if strings.Contains(tc.name, "Max") && !errors.Is(err, ErrTooLarge) {
					t.Errorf("error %v does not wrap ErrTooLarge", err)
				}
				requireEmpty(t, s)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, img, out)
		})
	}
}

// TestStreamBound: padding after a layer's tar end is read only up to
// MaxBytes plus the per-entry slack.
func TestStreamBound(t *testing.T) {
	t.Parallel()
	data := layerTar(t, file("a", "x"))
	data = append(data, make([]byte, 2*streamSlackPerEntry)...)
	s := newStore(t, Config{MaxBytes: 1000, MaxEntries: 1})
	_, err := s.ImportArchive(t.Context(), archiveOf(t, data))
	mustContain(t, err, "layer streams over MaxBytes")
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("error %v does not wrap ErrTooLarge", err)
	}
	requireEmpty(t, s)
}

// TestDiffIDMismatch: a config that names another layer's content cannot
// store a rootfs under that content's name.
func TestDiffIDMismatch(t *testing.T) {
	t.Parallel()
	img := buildImage(t, layerTar(t, file("evil", "pwned")))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	honest := buildImage(t, layerTar(t, file("good", "ok")))
	hcf, err := honest.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.RootFS.DiffIDs = []v1.Hash{hcf.RootFS.DiffIDs[0]}
	lying, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{})
	_, err = s.ImportArchive(t.Context(), writeArchive(t, lying))
	if err == nil {
		t.Fatal("an image whose config lies about its layer was imported")
	}
	t.Logf("refused: %v", err)
	requireEmpty(t, s)
}

// TestImportCancelled: a cancelled context stops the import and leaves
// nothing.
func TestImportCancelled(t *testing.T) {
	t.Parallel()
	path := archiveOf(t, layerTar(t, file("a", "x")))
	s := newStore(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if _, err := s.ImportArchive(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("import with an expired context: %v", err)
	}
	requireEmpty(t, s)
}
