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
