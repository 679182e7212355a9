package testutil

import (
	"syscall"
	"testing"
)

// Stat is path's stat(2), failing the test when there is none.
func Stat(t testing.TB, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
