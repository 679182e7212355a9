package main

import (
	"strings"
	"testing"
)

// A row is PASS only when the test and every subtest passed: a parent
// passes on its own even when its subtests skipped or failed.
func TestReportCountsSubtests(t *testing.T) {
	t.Parallel()
	ev := func(action, test string, elapsed string) string {
		return `{"Action":"` + action + `","Package":"p","Test":"` + test + `","Elapsed":` + elapsed + `}`
	}
	stream := strings.Join([]string{
		ev("pass", "TestAll/a", "1.5"), ev("pass", "TestAll/b", "2"), ev("pass", "TestAll", "0.1"),
		ev("skip", "TestSkipped/disk_full", "0"), ev("pass", "TestSkipped/read_only", "0.3"), ev("pass", "TestSkipped", "0.4"),
		ev("fail", "TestFailed/a", "0.2"), ev("fail", "TestFailed", "0.3"),
		`{"Action":"output","Package":"p","Test":"TestFailed/a","Output":"    x_test.go:1: measured: 3 retries\n"}`,
		ev("skip", "TestOwnSkip", "0"),
		`{"Action":"pass","Package":"p","Elapsed":3}`,
	}, "\n")
	got := parseTestEvents([]byte(stream))
	for name, want := range map[string]string{
		"TestAll":     "PASS 2.0s",
		"TestSkipped": "SKIP 0.4s (subtests: 1 passed, 0 failed, 1 skipped)",
		"TestFailed":  "FAIL 0.3s (subtests: 0 passed, 1 failed, 0 skipped)",
		"TestOwnSkip": "SKIP 0.0s",
	} {
		if c := got[name].cell(); c != want {
			t.Errorf("%s: %q, want %q", name, c, want)
		}
	}
	if m := got["TestFailed"].measured; len(m) != 1 || m[0] != "a: 3 retries" {
		t.Errorf("measured lines: %q", m)
	}
}

// A run rewrites its own Redis mode's measured section and keeps the
// other's from the file as it was, or says it was never measured.
func TestReportKeepsTheOtherModesSection(t *testing.T) {
	t.Parallel()
	begin, end := sectionMarkers(redisCluster)
	old := "# Reliability\n\n" + begin + "## Measured: cluster\n\nrun of 05:00\n" + end + "\n## Bad input\n"
	for _, tc := range []struct {
		name, old string
		want      []string
	}{
		{"kept", old, []string{begin, "run of 05:00", end}},
		{"never measured", "# Reliability\n", []string{begin, "Not measured yet: `go run ./test/soak -redis cluster", end}},
		{"end marker missing", "# Reliability\n" + begin + "cut short", []string{"Not measured yet"}},
	} {
		got := keptSection([]byte(tc.old), redisCluster)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
		if strings.Contains(got, "Bad input") {
			t.Errorf("%s: kept past its end marker: %q", tc.name, got)
		}
	}
}
