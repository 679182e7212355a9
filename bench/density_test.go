package main

import (
	"os"
	"slices"
	"testing"
)

func TestParseRollup(t *testing.T) {
	t.Parallel()
	data := []byte("55d0c0000000-7ffd2f1b3000 ---p 00000000 00:00 0                          [rollup]\n" +
		"Rss:                8504 kB\nPss:                2857 kB\nPss_Dirty:          1448 kB\n" +
		"Pss_Anon:           1448 kB\nPss_File:           1409 kB\nPss_Shmem:             0 kB\n")
	got := parseRollup(data)
	want := memRollup{rss: 8504 << 10, pss: 2857 << 10, pssAnon: 1448 << 10, pssFile: 1409 << 10}
	if got != want {
		t.Fatalf("parseRollup = %+v, want %+v (Pss_Dirty must not be read as Pss)", got, want)
	}
}

func TestProcTreeDescendants(t *testing.T) {
	t.Parallel()
	tree := procTree{1: {10, 11}, 10: {100}, 100: {1000}, 2: {20}}
	got := tree.descendants(10)
	slices.Sort(got)
	if want := []int{100, 1000}; !slices.Equal(got, want) {
		t.Fatalf("descendants(10) = %v, want %v", got, want)
	}
	// The real /proc: this test process is below its parent.
	real, err := readProcTree()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(real.descendants(os.Getppid()), os.Getpid()) {
		t.Fatalf("this process %d is not among its parent's descendants", os.Getpid())
	}
	if m, err := readRollup(os.Getpid()); err != nil || m.pss <= 0 || m.rss < m.pss {
		t.Fatalf("own smaps_rollup: %+v, %v", m, err)
	}
}
