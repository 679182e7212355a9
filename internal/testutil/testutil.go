// Package testutil starts the real services tests run against: a
// redis-server on a free loopback port and the gateway binary itself.
// Under CI=true a missing service fails the test; otherwise it skips.
package testutil

import (
	"net"
	"os"
	"sync"
	"testing"
)

// Require skips the test when a needed service is missing, or fails it
// under CI=true, where every service must be present.
func Require(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true (run `make test`, which installs it)", what)
	}
	t.Skipf("%s not available; `make test` installs it", what)
}

// FreePort returns a loopback TCP port that was free a moment ago and that
// this test process has not handed out before: parallel tests would
// otherwise be given the same just-closed port and race to bind it.
func FreePort(t testing.TB) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if _, taken := handedOut.LoadOrStore(port, true); !taken {
			return port
		}
	}
}

var handedOut sync.Map // port -> true
