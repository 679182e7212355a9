package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		want    Stats
	}{
		{"none", nil, Stats{}},
		{"one", ms(7), Stats{N: 1, P50: 7 * time.Millisecond, P90: 7 * time.Millisecond, P99: 7 * time.Millisecond, Max: 7 * time.Millisecond}},
		{"unsorted", ms(5, 1, 4, 2, 3), Stats{N: 5, P50: 3 * time.Millisecond, P90: 5 * time.Millisecond, P99: 5 * time.Millisecond, Max: 5 * time.Millisecond}},
		{"1..100", ms(hundred...), Stats{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}},
	} {
		if got := summarize(tc.samples); got != tc.want {
			t.Errorf("%s: summarize = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestWriteDocKeepsEverySuite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"b-suite", "a-suite"} {
		res := Result{Name: name, Title: "Title " + name, Command: "go run ./bench -suite " + name,
			Columns: []string{"x", "y"}, Rows: [][]string{{"1", "2"}}, Notes: []string{"note " + name}, Machine: machine()}
		if err := writeJSON(filepath.Join(dir, name+".json"), res); err != nil {
			t.Fatal(err)
		}
	}
	doc := filepath.Join(dir, "docs", "BENCHMARKS.md")
	head := docHeader{Command: "go run ./bench -timeout 20m", Machine: machine(), Memory: "24.0 GiB", Kernel: "Linux 6.1",
		Versions: []string{"go1.26", "redis-server v=7"}}
	if err := writeDoc(dir, doc, head); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	goals, a, b := strings.Index(s, "## Goals"), strings.Index(s, "## Title a-suite"), strings.Index(s, "## Title b-suite")
	if goals < 0 || a < goals || b < a || !strings.Contains(s, "| 1 | 2 |") || !strings.Contains(s, "- note b-suite") ||
		!strings.Contains(s, "`go run ./bench -suite a-suite`") || !strings.Contains(s, "`go run ./bench -timeout 20m`") ||
		!strings.Contains(s, "24.0 GiB") || !strings.Contains(s, "redis-server v=7") {
		t.Fatalf("doc lacks its header, the goals, a suite, or is out of order:\n%s", s)
	}
	// No proxy figures: every goal says it was not measured, and there is no chart.
	if strings.Count(s, "| not measured |") != len(goalRows(nil)) || !strings.Contains(s, "No chart") {
		t.Fatalf("goals without figures:\n%s", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "docs", chartFile)); !os.IsNotExist(err) {
		t.Fatalf("chart drawn without figures: %v", err)
	}
}
