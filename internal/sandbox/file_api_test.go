package sandbox

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestFileWriteRead(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	file := vWorkspace + "/new/dir/f.txt"
	w := okData[map[string]any](t, ts, "/v1/file/write", map[string]any{"file": file, "content": "l0\nl1\nl2\n"})
	if w["file"] != file || w["bytes_written"] != float64(9) {
		t.Fatalf("write: %v", w)
	}
	okData[map[string]any](t, ts, "/v1/file/write", map[string]any{"file": "new/dir/f.txt", "content": "l3", "append": true})
	if raw, _ := os.ReadFile(filepath.Join(ts.ws, "new/dir/f.txt")); string(raw) != "l0\nl1\nl2\nl3" {
		t.Fatalf("on disk: %q", raw)
	}
	for _, tc := range []struct {
		name       string
		start, end any
		want       string
	}{
		{"whole file", nil, nil, "l0\nl1\nl2\nl3"},
		{"range", 1, 3, "l1\nl2\n"},
		{"from line to end", 2, nil, "l2\nl3"},
		{"first line", 0, 1, "l0\n"},
		{"past the end", 10, nil, ""},
		{"empty range", 2, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"file": file}
			if tc.start != nil {
				body["start_line"] = tc.start
			}
			if tc.end != nil {
				body["end_line"] = tc.end
			}
			r := okData[fileReadResult](t, ts, "/v1/file/read", body)
			if r.Content != tc.want || r.File != file || r.Encoding != "utf-8" {
				t.Fatalf("read %v: %+v, want %q", body, r, tc.want)
			}
		})
	}
}

func TestFileBinary(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 'x'}
	okData[map[string]any](t, ts, "/v1/file/write", map[string]any{
		"file": "b.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"})
	if raw, _ := os.ReadFile(filepath.Join(ts.ws, "b.bin")); !bytes.Equal(raw, bin) {
		t.Fatalf("base64 write stored %v", raw)
	}
	r := okData[fileReadResult](t, ts, "/v1/file/read", map[string]any{"file": "b.bin"})
	got, err := base64.StdEncoding.DecodeString(r.Content)
	if r.Encoding != "base64" || err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("binary read: %+v", r)
	}
	wantStatus(t, ts.post(t, "/v1/file/write", map[string]any{"file": "c", "content": "!!", "encoding": "base64"}), http.StatusUnprocessableEntity, "content")
	wantStatus(t, ts.post(t, "/v1/file/write", map[string]any{"file": "c", "content": "x", "encoding": "latin1"}), http.StatusUnprocessableEntity, "encoding")
}

func TestFileReplace(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	if err := os.WriteFile(filepath.Join(ts.ws, "r.txt"), []byte("a-b-a-c-a"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := okData[map[string]any](t, ts, "/v1/file/replace", map[string]any{"file": "r.txt", "old_str": "a", "new_str": "Z"})
	raw, _ := os.ReadFile(filepath.Join(ts.ws, "r.txt"))
	if r["replaced_count"] != float64(3) || string(raw) != "Z-b-Z-c-Z" {
		t.Fatalf("replace: %v %q", r, raw)
	}
	if fi, _ := os.Stat(filepath.Join(ts.ws, "r.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("replace changed mode to %v", fi.Mode())
	}
	wantStatus(t, ts.post(t, "/v1/file/replace", map[string]any{"file": "r.txt", "old_str": "nope", "new_str": ""}), http.StatusUnprocessableEntity, "old_str")
	wantStatus(t, ts.post(t, "/v1/file/replace", map[string]any{"file": "r.txt", "old_str": "Z"}), http.StatusUnprocessableEntity, "new_str")
	wantStatus(t, ts.post(t, "/v1/file/replace", map[string]any{"file": "missing", "old_str": "a", "new_str": "b"}), http.StatusNotFound, "")
	wantStatus(t, ts.post(t, "/v1/file/replace", map[string]any{"file": vSkills + "/SKILL.md", "old_str": "#", "new_str": "b"}), http.StatusForbidden, "")
}

func TestFileAccessControl(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ts.ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, link := range []struct{ name, target string }{
		{"out", outside}, // symlink leaving every mapping
		{"skills", filepath.Join(ts.root, "skills")},        // symlink into the read-only mapping
		{"dangling", filepath.Join(outside, "nope", "new")}, // write would land outside
	} {
		if err := os.Symlink(link.target, filepath.Join(ts.ws, link.name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		status     int
		field      string
	}{
		{"dotdot escape", "/v1/file/read", map[string]any{"file": vWorkspace + "/../../../../etc/passwd"}, http.StatusForbidden, ""},
		{"relative escape", "/v1/file/read", map[string]any{"file": "../../../etc/passwd"}, http.StatusForbidden, ""},
		{"unmapped absolute", "/v1/file/read", map[string]any{"file": "/etc/passwd"}, http.StatusForbidden, ""},
		{"look-alike prefix", "/v1/file/write", map[string]any{"file": vWorkspace + "2/x", "content": "x"}, http.StatusForbidden, ""},
		{"symlink out", "/v1/file/read", map[string]any{"file": "out/secret"}, http.StatusForbidden, ""},
		{"symlink into read-only", "/v1/file/write", map[string]any{"file": "skills/x", "content": "x"}, http.StatusForbidden, ""},
		{"dangling symlink", "/v1/file/write", map[string]any{"file": "dangling", "content": "x"}, http.StatusForbidden, ""},
		{"read-only write", "/v1/file/write", map[string]any{"file": vSkills + "/new", "content": "x"}, http.StatusForbidden, ""},
		{"read-only append", "/v1/file/write", map[string]any{"file": vSkills + "/SKILL.md", "content": "x", "append": true}, http.StatusForbidden, ""},
		{"missing file", "/v1/file/read", map[string]any{"file": "nope.txt"}, http.StatusNotFound, ""},
		{"directory", "/v1/file/read", map[string]any{"file": vWorkspace}, http.StatusUnprocessableEntity, "file"},
		{"fifo read never blocks", "/v1/file/read", map[string]any{"file": "fifo"}, http.StatusUnprocessableEntity, "file"},
		{"fifo write never blocks", "/v1/file/write", map[string]any{"file": "fifo", "content": "x"}, http.StatusUnprocessableEntity, "file"},
		{"no file field", "/v1/file/read", map[string]any{}, http.StatusUnprocessableEntity, "file"},
		{"negative start", "/v1/file/read", map[string]any{"file": "x", "start_line": -1}, http.StatusUnprocessableEntity, "start_line"},
		{"end before start", "/v1/file/read", map[string]any{"file": "x", "start_line": 3, "end_line": 1}, http.StatusUnprocessableEntity, "end_line"},
		{"no content", "/v1/file/write", map[string]any{"file": "x"}, http.StatusUnprocessableEntity, "content"},
		{"no old_str", "/v1/file/replace", map[string]any{"file": "x", "new_str": "y"}, http.StatusUnprocessableEntity, "old_str"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, ts.post(t, tc.path, tc.body), tc.status, tc.field)
		})
	}
	// reading through a symlink into a read-only mapping is fine
	r := okData[fileReadResult](t, ts, "/v1/file/read", map[string]any{"file": "skills/SKILL.md"})
	if r.Content != "# skill\n" {
		t.Fatalf("read via symlink: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(outside, "nope")); err == nil {
		t.Fatal("dangling-symlink write created a file outside the mappings")
	}
	wantStatus(t, ts.post(t, "/v1/file/read", `{"file": `), http.StatusBadRequest, "")
}

func TestFileReadTooLarge(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	big := bytes.Repeat([]byte("0123456789abcdef\n"), maxFileContent/17+10)
	if err := os.WriteFile(filepath.Join(ts.ws, "big.txt"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ts.post(t, "/v1/file/read", map[string]any{"file": "big.txt"}), http.StatusRequestEntityTooLarge, "")
	r := okData[fileReadResult](t, ts, "/v1/file/read", map[string]any{"file": "big.txt", "start_line": 5, "end_line": 7})
	if r.Content != "0123456789abcdef\n0123456789abcdef\n" {
		t.Fatalf("range of a big file: %q", r.Content)
	}
}

// upload posts a multipart body with parts in the given order.
func upload(t *testing.T, ts *testServer, pathFirst bool, target, name string, content []byte) apiResp {
	t.Helper()
	ct, body := uploadBody(target, name, content, pathFirst)
	return ts.send(t, http.MethodPost, "/v1/file/upload", http.Header{"Content-Type": {ct}}, body)
}

// uploadBody is an upload body and its Content-Type.
func uploadBody(target, name string, content []byte, pathFirst bool) (string, io.Reader) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	writePath := func() {
		if target != "" {
			_ = mw.WriteField("path", target)
		}
	}
	if pathFirst {
		writePath()
	}
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(content)
	if !pathFirst {
		writePath()
	}
	_ = mw.Close()
	return mw.FormDataContentType(), &buf
}

func TestUploadDownload(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	content := bytes.Repeat([]byte{0, 'a', 0xff}, 100000)
	for _, tc := range []struct {
		name, target, filename, want string
		pathFirst                    bool
	}{
		{"path first", "/mnt/user-data/uploads/a.bin", "ignored.bin", "/mnt/user-data/uploads/a.bin", true},
		{"file first (spooled)", "/mnt/user-data/uploads/sub/b.bin", "x", "/mnt/user-data/uploads/sub/b.bin", false},
		{"into a directory", "/mnt/user-data/uploads", "c.bin", "/mnt/user-data/uploads/c.bin", true},
		{"trailing slash creates dir", "/mnt/user-data/uploads/new/", "d.bin", "/mnt/user-data/uploads/new/d.bin", true},
		{"no path: home", "", "e.bin", vWorkspace + "/e.bin", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := upload(t, ts, tc.pathFirst, tc.target, tc.filename, content)
			if r.Status != http.StatusOK || !strings.Contains(r.Body, `"file_path":"`+tc.want+`"`) || !strings.Contains(r.Body, `"file_size":300000`) {
				t.Fatalf("upload: %d %s", r.Status, r.Body)
			}
			res, err := http.Get(ts.URL + "/v1/file/download?path=" + tc.want)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || !bytes.Equal(got, content) {
				t.Fatalf("download: %d, %d bytes", res.StatusCode, len(got))
			}
			if cd := res.Header.Get("Content-Disposition"); cd != "attachment; filename="+filepath.Base(tc.want) {
				t.Fatalf("Content-Disposition %q", cd)
			}
		})
	}
	if r := upload(t, ts, true, vSkills+"/x.bin", "x.bin", content); r.Status != http.StatusForbidden {
		t.Fatalf("upload to read-only: %d %s", r.Status, r.Body)
	}
	if r := upload(t, ts, true, "/etc/x.bin", "x.bin", content); r.Status != http.StatusForbidden {
		t.Fatalf("upload outside: %d %s", r.Status, r.Body)
	}
	if entries, _ := os.ReadDir(ts.srv.stateDir); len(entries) != 0 {
		t.Fatalf("spool files left behind: %v", entries)
	}
	for _, tc := range []struct {
		query  string
		status int
	}{
		{"", http.StatusUnprocessableEntity},
		{"?path=" + vWorkspace + "/nope", http.StatusNotFound},
		{"?path=/etc/passwd", http.StatusForbidden},
		{"?path=" + vWorkspace, http.StatusUnprocessableEntity},
	} {
		wantStatus(t, ts.do(t, http.MethodGet, "/v1/file/download"+tc.query, nil), tc.status, "")
	}
}
