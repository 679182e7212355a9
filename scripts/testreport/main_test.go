package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// module writes a throw-away module whose tests pass, skip and fail as
// named, so the report runs on real go test -json output.
func module(t *testing.T, tests map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"go.mod": "module demo\n\ngo 1.22\n"}
	for pkg, body := range tests {
		files[filepath.Join(pkg, pkg+"_test.go")] = "package " + pkg + "\n\nimport \"testing\"\n\n" + body
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReportOnARealRun(t *testing.T) {
	t.Parallel()
	dir := module(t, map[string]string{
		"good": "func TestFine(t *testing.T) { t.Log(\"quiet\") }\n" +
			"func TestNoChattr(t *testing.T) { t.Skip(\"chattr not installed\") }\n",
		"bad": "func TestBroken(t *testing.T) {\n\tt.Run(\"inner\", func(t *testing.T) { t.Error(\"the check failed\") })\n}\n" +
			"func TestFine2(t *testing.T) {}\n",
	})
	for _, tc := range []struct {
		name     string
		pkgs     []string
		ci       bool
		status   int
		want     []string // lines that must be in the output
		wantNot  []string
		lastLine string
	}{
		{
			name: "a skip is tolerated without CI", pkgs: []string{"./good"}, status: 0,
			want:     []string{"ok  \tdemo/good\t", "--- SKIP: TestNoChattr (demo/good): good_test.go:6: chattr not installed"},
			wantNot:  []string{"quiet", "FAIL"},
			lastLine: "1 passed, 0 failed, 1 skipped",
		},
		{
			name: "a skip under CI=true fails by name", pkgs: []string{"./good"}, ci: true, status: 1,
			want:     []string{"ok  \tdemo/good\t", "1 tests skipped under CI=true", "--- FAIL: TestNoChattr (demo/good): good_test.go:6: chattr not installed", "FAIL\n"},
			lastLine: "1 passed, 1 failed, 0 skipped",
		},
		{
			name: "a failed subtest prints its output and fails its package", pkgs: []string{"./bad", "./good"}, status: 1,
			want: []string{"--- FAIL: TestBroken (", "--- FAIL: TestBroken/inner (", "bad_test.go:6: the check failed",
				"FAIL\tdemo/bad\t", "ok  \tdemo/good\t", "--- SKIP: TestNoChattr"},
			wantNot:  []string{"TestFine2"},
			lastLine: "2 passed, 2 failed, 1 skipped",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			status := run(dir, append([]string{"-count=1"}, tc.pkgs...), tc.ci, &out, &errOut)
			s := out.String()
			if status != tc.status {
				t.Errorf("exit status %d, want %d\n%s%s", status, tc.status, s, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("output lacks %q:\n%s", w, s)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(s, w) {
					t.Errorf("output has %q:\n%s", w, s)
				}
			}
			lines := strings.Split(strings.TrimSpace(s), "\n")
			if last := lines[len(lines)-1]; last != tc.lastLine {
				t.Errorf("closing line %q, want %q", last, tc.lastLine)
			}
		})
	}
}

// A package whose binary timed out: the test still running is named as
// failed, with the panic, and so is the package.
func TestReportNamesTestsCutOffByATimeout(t *testing.T) {
	t.Parallel()
	stream := strings.Join([]string{
		`{"Action":"start","Package":"demo/slow"}`,
		`{"Action":"run","Package":"demo/slow","Test":"TestQuick"}`,
		`{"Action":"pass","Package":"demo/slow","Test":"TestQuick","Elapsed":0.01}`,
		`{"Action":"run","Package":"demo/slow","Test":"TestHang"}`,
		`{"Action":"output","Package":"demo/slow","Test":"TestHang","Output":"panic: test timed out after 5m0s\n"}`,
		`{"Action":"output","Package":"demo/slow","Output":"FAIL\tdemo/slow\t300.012s\n"}`,
		`{"Action":"fail","Package":"demo/slow","Elapsed":300.012}`,
		`{"Action":"start","Package":"demo/gone"}`,
		`{"Action":"run","Package":"demo/gone","Test":"TestNeverEnded"}`,
	}, "\n")
	var out bytes.Buffer
	r := newReport(&out, false)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if r.finish(true) {
		t.Error("a timed-out package passed")
	}
	want := "panic: test timed out after 5m0s\n" +
		"--- FAIL: TestHang (unfinished: the test binary timed out or crashed)\n" +
		"FAIL\tdemo/slow\t300.012s\n" +
		"--- FAIL: TestNeverEnded (unfinished: the test binary timed out or crashed)\n" +
		"FAIL\tdemo/gone\t0.000s\n" +
		"FAIL\n" +
		"1 passed, 2 failed, 0 skipped\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A race report printed in a test that passed, while the race detector
// failed the tests running then, is shown with the failures, not dropped
// with the passing test's output.
func TestReportKeepsARaceReportOfAPassedTest(t *testing.T) {
	t.Parallel()
	stream := strings.Join([]string{
		`{"Action":"start","Package":"demo/racy"}`,
		`{"Action":"run","Package":"demo/racy","Test":"TestWriter"}`,
		`{"Action":"run","Package":"demo/racy","Test":"TestVictim"}`,
		`{"Action":"output","Package":"demo/racy","Test":"TestWriter","Output":"WARNING: DATA RACE\n"}`,
		`{"Action":"output","Package":"demo/racy","Test":"TestWriter","Output":"Write at 0x00c by goroutine 7:\n"}`,
		`{"Action":"pass","Package":"demo/racy","Test":"TestWriter","Elapsed":0.01}`,
		`{"Action":"output","Package":"demo/racy","Test":"TestVictim","Output":"    testing.go:1712: race detected during execution of test\n"}`,
		`{"Action":"fail","Package":"demo/racy","Test":"TestVictim","Elapsed":0.01}`,
		`{"Action":"output","Package":"demo/racy","Output":"FAIL\tdemo/racy\t0.100s\n"}`,
		`{"Action":"fail","Package":"demo/racy","Elapsed":0.1}`,
	}, "\n")
	var out bytes.Buffer
	r := newReport(&out, false)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	r.finish(true)
	if !strings.Contains(out.String(), "WARNING: DATA RACE\nWrite at 0x00c by goroutine 7:\n") {
		t.Errorf("the race report is missing:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "1 passed, 1 failed, 0 skipped") {
		t.Errorf("the counts changed:\n%s", out.String())
	}
}
