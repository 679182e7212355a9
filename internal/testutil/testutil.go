// Package testutil starts the real services tests run against: a
// redis-server on a free loopback port and the gateway binary itself.
// Under CI=true a missing service fails the test; otherwise it skips.
package testutil

import (
	"net"
	"os"
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

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
