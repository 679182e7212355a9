package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// The first SIGTERM starts the drain; only a second one hurries it.
func TestSecondSignalHurries(t *testing.T) {
	hurry, stop := secondSignal()
	defer stop()
	self := os.Getpid()
	if err := syscall.Kill(self, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hurry.Done():
		t.Fatal("hurried by the first signal")
	case <-time.After(200 * time.Millisecond):
	}
	if err := syscall.Kill(self, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hurry.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a second signal did not hurry the drain")
	}
}
