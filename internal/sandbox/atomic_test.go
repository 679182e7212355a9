package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// fullWorkspace mounts a small tmpfs on the workspace and fills it up
// (tests run as root; without mount rights they skip, under CI they fail).
func fullWorkspace(t *testing.T, ts *testServer, keep []byte) {
	t.Helper()
	err := syscall.Mount("tmpfs", ts.ws, "tmpfs", 0, "size=64k,nr_inodes=64")
	testutil.Require(t, err == nil, fmt.Sprintf("mounting a tmpfs (%v)", err))
	t.Cleanup(func() { _ = syscall.Unmount(ts.ws, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(ts.ws, "keep.txt"), keep, 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(ts.ws, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
}

// assertIntact requires keep.txt byte-identical, its mode unchanged, and
// nothing but keep.txt and filler in the workspace.
func assertIntact(t *testing.T, ts *testServer, keep []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(ts.ws, "keep.txt"))
	if err != nil || !bytes.Equal(got, keep) {
		t.Errorf("keep.txt = %q (%v), want the old content %q", got, err, keep)
	}
	if fi, err := os.Stat(filepath.Join(ts.ws, "keep.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("keep.txt mode %v (%v), want 0640", fi.Mode(), err)
	}
	entries, err := os.ReadDir(ts.ws)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "filler,keep.txt" {
		t.Errorf("workspace holds %v, want only filler and keep.txt (no temp file left)", names)
	}
}

// On a full disk every write-like call answers 507 and leaves the old
// content byte-identical with no temporary file.
func TestFullDiskKeepsOldContent(t *testing.T) {
	t.Parallel()
	keep := []byte("line one OLD\nline two\n")
	file := vWorkspace + "/keep.txt"
	big := strings.Repeat("x", 32<<10)
	for _, tc := range []struct {
		name string
		call func(t *testing.T, ts *testServer) apiResp
	}{
		{"write", func(t *testing.T, ts *testServer) apiResp {
			return ts.post(t, "/v1/file/write", map[string]any{"file": file, "content": big})
		}},
		{"write append", func(t *testing.T, ts *testServer) apiResp {
			return ts.post(t, "/v1/file/write", map[string]any{"file": file, "content": big, "append": true})
		}},
		{"replace", func(t *testing.T, ts *testServer) apiResp {
			return ts.post(t, "/v1/file/replace", map[string]any{"file": file, "old_str": "OLD", "new_str": big})
		}},
		{"editor str_replace", func(t *testing.T, ts *testServer) apiResp {
			return ts.post(t, "/v1/file/str_replace_editor", map[string]any{"command": "str_replace", "path": file, "old_str": "OLD", "new_str": big})
		}},
		{"editor insert", func(t *testing.T, ts *testServer) apiResp {
			return ts.post(t, "/v1/file/str_replace_editor", map[string]any{"command": "insert", "path": file, "insert_line": 1, "new_str": big})
		}},
		{"upload", func(t *testing.T, ts *testServer) apiResp {
			return upload(t, ts, true, file, "keep.txt", []byte(big))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newHostServer(t)
			fullWorkspace(t, ts, keep)
			r := tc.call(t, ts)
			if r.Status != http.StatusInsufficientStorage || !strings.Contains(r.Message, file) {
				t.Errorf("%d %s, want 507 naming %s", r.Status, r.Body, file)
			}
			assertIntact(t, ts, keep)
		})
	}
}

// Writes keep an existing file's mode; new files get 0644 minus the umask.
func TestWriteKeepsMode(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	old := filepath.Join(ts.ws, "old.sh")
	if err := os.WriteFile(old, []byte("v1"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o750); err != nil {
		t.Fatal(err)
	}
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	for _, tc := range []struct {
		name string
		want os.FileMode
	}{{"old.sh", 0o750}, {"new.txt", 0o644 &^ os.FileMode(umask)}} {
		r := ts.post(t, "/v1/file/write", map[string]any{"file": vWorkspace + "/" + tc.name, "content": "v2"})
		if r.Status != http.StatusOK {
			t.Fatalf("write %s: %d %s", tc.name, r.Status, r.Body)
		}
		fi, err := os.Stat(filepath.Join(ts.ws, tc.name))
		if err != nil || fi.Mode().Perm() != tc.want {
			t.Errorf("%s: mode %v (%v), want %v", tc.name, fi.Mode(), err, tc.want)
		}
	}
}

// Writes and edits through a symlink change the file it points to and
// keep the link.
func TestWriteThroughSymlinkKeepsLink(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	real, link := filepath.Join(ts.ws, "real.txt"), filepath.Join(ts.ws, "link.txt")
	if err := os.WriteFile(real, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.txt", link); err != nil {
		t.Fatal(err)
	}
	file := vWorkspace + "/link.txt"
	for _, call := range []struct {
		path string
		body map[string]any
		want string
	}{
		{"/v1/file/write", map[string]any{"file": file, "content": "v2"}, "v2"},
		{"/v1/file/replace", map[string]any{"file": file, "old_str": "v2", "new_str": "v3"}, "v3"},
	} {
		r := ts.post(t, call.path, call.body)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", call.path, r.Status, r.Body)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s replaced the symlink (%v)", call.path, err)
		}
		if got, _ := os.ReadFile(real); string(got) != call.want {
			t.Errorf("%s: real.txt = %q, want %q", call.path, got, call.want)
		}
	}
}

// Concurrent API replaces of one file are serialized by the path lock:
// replaces of different unique strings all apply; of the same string one
// applies and the other is a conflict (409, or 422 when it arrived after
// the first had finished). The file holds exactly the applied edits.
func TestConcurrentReplacesNeverLoseAnEdit(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	host := filepath.Join(ts.ws, "race.txt")
	conflicts := 0
	for round := range 20 {
		if err := os.WriteFile(host, []byte("alpha\nbeta\ngamma\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		edits := [][2]string{{"alpha", "ALPHA"}, {"beta", "BETA"}, {"gamma", "G1"}, {"gamma", "G2"}}
		status := make([]int, len(edits))
		var wg sync.WaitGroup
		for i, e := range edits {
			wg.Go(func() {
				r := ts.post(t, "/v1/file/replace", map[string]any{"file": vWorkspace + "/race.txt", "old_str": e[0], "new_str": e[1]})
				status[i] = r.Status
				if r.Status == http.StatusConflict && !strings.Contains(r.Body, `"code":"conflict"`) {
					t.Errorf("409 without code conflict: %s", r.Body)
				}
			})
		}
		wg.Wait()
		want := "alpha\nbeta\ngamma\n"
		for i, e := range edits {
			switch status[i] {
			case http.StatusOK:
				want = strings.Replace(want, e[0], e[1], 1)
			case http.StatusConflict:
				conflicts++
			case http.StatusUnprocessableEntity:
				if i < 2 {
					t.Errorf("round %d: replace of unique %q: 422", round, e[0])
				}
			default:
				t.Errorf("round %d: replace %q: status %d", round, e[0], status[i])
			}
		}
		if status[0] != http.StatusOK || status[1] != http.StatusOK {
			t.Errorf("round %d: replaces of different unique strings: %v, want both 200", round, status[:2])
		}
		if (status[2] == http.StatusOK) == (status[3] == http.StatusOK) {
			t.Errorf("round %d: two replaces of one string: %v, want exactly one 200", round, status[2:])
		}
		if got, _ := os.ReadFile(host); string(got) != want {
			t.Errorf("round %d: file %q, want exactly the applied edits %q (statuses %v)", round, got, want, status)
		}
	}
	t.Logf("20 rounds × 4 concurrent replaces: %d conflicts answered 409", conflicts)
}

// A change made outside the API between an edit's read and its rename (a
// command) is a 409 and survives; the edit is dropped, no temp file left.
func TestEditOfAFileChangedMeanwhileIsAConflict(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	host := filepath.Join(ts.ws, "c.txt")
	if err := os.WriteFile(host, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := ts.srv.editFile("file", vWorkspace+"/c.txt", func(old []byte) ([]byte, error) {
		// what a command does while the API edit is under way
		if err := os.WriteFile(host, []byte("by a command\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return []byte("by the api\n"), nil
	})
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusConflict || ae.code != "conflict" {
		t.Fatalf("edit of a file changed meanwhile: %v, want 409 conflict", err)
	}
	if got, _ := os.ReadFile(host); string(got) != "by a command\n" {
		t.Errorf("file %q, want the command's change kept", got)
	}
	if entries, _ := os.ReadDir(ts.ws); len(entries) != 1 {
		t.Errorf("workspace holds %d entries, want only c.txt", len(entries))
	}
}

// An upload whose client goes away mid-body leaves no file and no
// temporary file behind.
func TestAbortedUploadLeavesNoTempFile(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, pathFirst := range []bool{true, false} {
		ct, body := uploadBody(vWorkspace+"/up.bin", "up.bin", bytes.Repeat([]byte("z"), 1<<20), pathFirst)
		raw, _ := io.ReadAll(body)
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/file/upload HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", ct, len(raw))
		if _, err := conn.Write(raw[:len(raw)/2]); err != nil {
			t.Fatal(err)
		}
		// the temp file must exist before the abort, or the test proves nothing
		dirs := []string{ts.ws, ts.srv.ensureStateDir()}
		waitFor(t, func() bool { return len(tempFiles(t, dirs)) > 0 }, "a temp file while the upload runs")
		_ = conn.Close()
		waitFor(t, func() bool { return len(tempFiles(t, dirs)) == 0 }, "no temp file after the abort")
		if _, err := os.Stat(filepath.Join(ts.ws, "up.bin")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("path first %v: aborted upload left up.bin (%v)", pathFirst, err)
		}
	}
}

func tempFiles(t *testing.T, dirs []string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.Contains(e.Name(), tmpInfix) {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
