package events

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (loops, timers, subscribers) must be gone
// when the package's tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
