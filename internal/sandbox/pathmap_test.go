package sandbox

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// The process backend's layout: three user-data dirs of one thread plus
// read-only skills.
var testMappings = []Mapping{
	{Virtual: "/mnt/user-data/workspace", Host: "/data/users/u/threads/t/user-data/workspace"},
	{Virtual: "/mnt/user-data/uploads", Host: "/data/users/u/threads/t/user-data/uploads"},
	{Virtual: "/mnt/user-data/outputs", Host: "/data/users/u/threads/t/user-data/outputs"},
	{Virtual: "/mnt/skills", Host: "/srv/skills", ReadOnly: true},
	{Virtual: "/mnt/skills/custom", Host: "/srv/custom-skills"},
}

func testPathMap(t testing.TB) *PathMap {
	t.Helper()
	pm, err := NewPathMap(testMappings)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

func TestPathMapToHost(t *testing.T) {
	t.Parallel()
	pm := testPathMap(t)
	const ws = "/data/users/u/threads/t/user-data/workspace"
	for _, tc := range []struct {
		virtual, host string
		ro            bool
		err           error
	}{
		{"/mnt/user-data/workspace", ws, false, nil},
		{"/mnt/user-data/workspace/", ws, false, nil},
		{"/mnt/user-data/workspace/a/b.txt", ws + "/a/b.txt", false, nil},
		{"/mnt/user-data/workspace//a/./b/../c", ws + "/a/c", false, nil},
		{"/mnt/user-data/workspace/../uploads/f", "/data/users/u/threads/t/user-data/uploads/f", false, nil},
		{"/mnt/user-data/workspace/../../../etc/passwd", "", false, ErrPathOutside},
		{"/mnt/user-data/workspace2/x", "", false, ErrPathOutside},
		{"/mnt/user-data", "", false, ErrPathOutside},
		{"/mnt/skills/s/SKILL.md", "/srv/skills/s/SKILL.md", true, nil},
		{"/mnt/skills/custom/x", "/srv/custom-skills/x", false, nil}, // longest prefix wins
		{"/mnt/skills/customer", "/srv/skills/customer", true, nil},
		{"/etc/passwd", "", false, ErrPathOutside},
		{"relative/path", "", false, ErrPathOutside},
		{"/", "", false, ErrPathOutside},
	} {
		host, ro, err := pm.ToHost(tc.virtual)
		if host != tc.host || ro != tc.ro || !errors.Is(err, tc.err) {
			t.Errorf("ToHost(%q) = %q, %v, %v; want %q, %v, %v", tc.virtual, host, ro, err, tc.host, tc.ro, tc.err)
		}
	}
}

func TestPathMapToVirtualAndText(t *testing.T) {
	t.Parallel()
	pm := testPathMap(t)
	for _, tc := range []struct {
		host, virtual string
		ok            bool
	}{
		{"/data/users/u/threads/t/user-data/workspace/x", "/mnt/user-data/workspace/x", true},
		{"/srv/custom-skills", "/mnt/skills/custom", true},
		{"/data/users/u/threads/t/user-data", "/mnt/user-data", true}, // shared parent of three mappings
		{"/data/users/u/threads/t", "", false},
		{"/srv", "", false}, // one mapping below it: not derived
		{"/data/users/u/threads/t/user-data/workspace2", "/mnt/user-data/workspace2", true},
	} {
		got, ok := pm.ToVirtual(tc.host)
		if got != tc.virtual || ok != tc.ok {
			t.Errorf("ToVirtual(%q) = %q, %v; want %q, %v", tc.host, got, ok, tc.virtual, tc.ok)
		}
	}
	for _, tc := range []struct{ in, out string }{
		{"cat /mnt/skills/a /mnt/user-data/workspace/b", "cat /srv/skills/a /data/users/u/threads/t/user-data/workspace/b"},
		{"cd /mnt/user-data/workspace2", "cd /mnt/user-data/workspace2"},
		{"ls /x/mnt/skills", "ls /x/mnt/skills"},
		{"PATH=/mnt/skills/bin:/mnt/user-data/outputs", "PATH=/srv/skills/bin:/data/users/u/threads/t/user-data/outputs"},
		{`"/mnt/skills/custom/t"`, `"/srv/custom-skills/t"`},
		{"a/mnt/skills", "a/mnt/skills"},
	} {
		if got := pm.MapCommand(tc.in); got != tc.out {
			t.Errorf("MapCommand(%q) = %q, want %q", tc.in, got, tc.out)
		}
		if back := pm.Unmap(pm.MapCommand(tc.in)); back != tc.in {
			t.Errorf("Unmap(MapCommand(%q)) = %q", tc.in, back)
		}
	}
	if got := pm.Unmap("at /data/users/u/threads/t/user-data: /srv/skillsX /srv/skills.bak /srv/skills."); got != "at /mnt/user-data: /srv/skillsX /srv/skills.bak /mnt/skills." {
		t.Errorf("Unmap boundaries: %q", got)
	}
}

func TestNewPathMapRejects(t *testing.T) {
	t.Parallel()
	for _, ms := range [][]Mapping{
		{{Virtual: "rel", Host: "/h"}},
		{{Virtual: "/v", Host: "rel"}},
		{{Virtual: "/", Host: "/h"}},
		{{Virtual: "/v", Host: "/"}},
		{{Virtual: "/v", Host: "/a"}, {Virtual: "/v/", Host: "/b"}},
	} {
		if _, err := NewPathMap(ms); err == nil {
			t.Errorf("NewPathMap(%v) accepted", ms)
		}
	}
}

// TestUnmapperStreaming feeds output split at every byte position: the
// result must equal unmapping the whole text, so no host root slips out
// half-rewritten at a chunk boundary.
func TestUnmapperStreaming(t *testing.T) {
	t.Parallel()
	pm := testPathMap(t)
	text := "/data/users/u/threads/t/user-data/workspace/a\nx/srv/skills /srv/skills\n/srv/skillsZ /srv/skills.x /srv/skills. /srv/skills"
	want := pm.Unmap(text)
	for i := 0; i <= len(text); i++ {
		for j := i; j <= len(text); j++ {
			u := unmapper{pm: pm}
			var got []byte
			for _, part := range []string{text[:i], text[i:j], text[j:]} {
				got = append(got, u.feed([]byte(part))...)
			}
			got = append(got, u.flush()...)
			if string(got) != want {
				t.Fatalf("split %d/%d: %q, want %q", i, j, got, want)
			}
		}
	}
}

func TestResolveFollowsSymlinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ws, ro, out := filepath.Join(root, "ws"), filepath.Join(root, "ro"), filepath.Join(root, "out")
	for _, d := range []string{ws, ro, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"toOut": out, "toRO": ro, "toWS": ws, "dangling": filepath.Join(out, "x")} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	pm, err := NewPathMap([]Mapping{{Virtual: "/w", Host: ws}, {Virtual: "/r", Host: ro, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		virtual string
		ro      bool
		err     error
	}{
		{"/w/new/file", false, nil},
		{"/w/toWS/x", false, nil},
		{"/w/toRO/x", true, nil},
		{"/w/toOut/x", false, ErrPathOutside},
		{"/w/dangling", false, ErrPathOutside},
		{"/r/x", true, nil},
	} {
		_, ro, err := pm.Resolve(tc.virtual)
		if ro != tc.ro || !errors.Is(err, tc.err) {
			t.Errorf("Resolve(%q) = ro %v, err %v; want %v, %v", tc.virtual, ro, err, tc.ro, tc.err)
		}
	}
}

// FuzzPathMap checks the mapping invariants on arbitrary input: ToHost
// never panics; a mapped path stays inside its mapping's host root; virtual
// -> host -> virtual is the identity (on the cleaned path); host -> virtual
// -> host is too; text rewriting never panics and Unmap removes every host
// root that MapCommand put in.
func FuzzPathMap(f *testing.F) {
	for _, s := range []string{
		"/mnt/user-data/workspace/a", "/mnt/user-data/workspace/../../etc", "/mnt/skills/custom/../x",
		"/mnt/user-data/workspace2", "//mnt//skills/./a", "/", "", "rel/../x", "/mnt/skills/custom",
		"cat /mnt/skills/x > /mnt/user-data/outputs/y", "/data/users/u/threads/t/user-data/workspace",
	} {
		f.Add(s)
	}
	pm := testPathMap(f)
	f.Fuzz(func(t *testing.T, s string) {
		host, _, err := pm.ToHost(s)
		if err == nil {
			root := ""
			for _, m := range pm.mounts {
				if _, ok := within(path.Clean(s), m.virtual); ok {
					root = m.host
					break
				}
			}
			if _, ok := within(host, root); !ok || root == "" {
				t.Fatalf("ToHost(%q) = %q escapes its mapping root %q", s, host, root)
			}
			back, ok := pm.ToVirtual(host)
			if !ok || back != path.Clean(s) {
				t.Fatalf("round trip %q -> %q -> %q", s, host, back)
			}
		}
		if path.IsAbs(s) {
			if v, ok := pm.ToVirtual(s); ok {
				if h, _, err := pm.ToHost(v); err == nil && h != filepath.Clean(s) {
					t.Fatalf("host round trip %q -> %q -> %q", s, v, h)
				}
			}
		}
		mapped := pm.MapCommand(s)
		if !strings.Contains(s, "/data") && !strings.Contains(s, "/srv") {
			unmapped := pm.Unmap(mapped)
			for _, r := range pm.reverse {
				if strings.Contains(unmapped, r.from+"/") {
					t.Fatalf("Unmap(MapCommand(%q)) = %q still holds %q", s, unmapped, r.from)
				}
			}
		}
		u := unmapper{pm: pm}
		half := len(s) / 2
		streamed := string(append(append(u.feed([]byte(s[:half])), u.feed([]byte(s[half:]))...), u.flush()...))
		if streamed != pm.Unmap(s) {
			t.Fatalf("streamed unmap of %q = %q, want %q", s, streamed, pm.Unmap(s))
		}
	})
}
