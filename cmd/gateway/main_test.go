package main

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/config"
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

// A bad choice on the command line is a usage error, which main ends
// with exit 2 (issue 40, point 10: --backend dokcer exited 1).
func TestBadBackendIsAUsageError(t *testing.T) {
	err := run(context.Background(), []string{"--backend", "dokcer", "--data-dir", t.TempDir()})
	var usage *config.UsageError
	if !errors.As(err, &usage) {
		t.Fatalf("--backend dokcer: %v is not a usage error", err)
	}
}
