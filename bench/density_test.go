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

// The kernel's memory by kind is read from this host, and a step's cost
// per sandbox is its growth over the run's start, in KiB.
func TestKernelMem(t *testing.T) {
	t.Parallel()
	k := readKernelMem(readMeminfo())
	if k.slabUnreclaim <= 0 || k.pageTables <= 0 || k.kernelStack <= 0 {
		t.Fatalf("readKernelMem = %+v: /proc/meminfo's SUnreclaim, PageTables and KernelStack are never zero", k)
	}
	base := kernelMem{slabUnreclaim: 1 << 20, slabReclaim: 1 << 20, pageTables: 0, kernelStack: 0, percpu: 4 << 10}
	step := kernelMem{slabUnreclaim: 1<<20 + 100*300<<10, slabReclaim: 1<<20 + 100*20<<10, pageTables: 100 * 96 << 10,
		kernelStack: 100 * 112 << 10, percpu: 4<<10 + 100*8<<10}
	if got, want := step.perSandbox(base, 100), "300 / 20 / 96 / 112 / 8"; got != want {
		t.Fatalf("perSandbox = %q, want %q", got, want)
	}
}
