package pool

import "time"

// Clock is injected so tests move time without sleeping.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// nowAt is clock's time. With the real clock it is start itself: a clock
// read costs tens of nanoseconds, and the cached path already takes one for
// the acquire latency.
func nowAt(clock Clock, start time.Time) time.Time {
	if _, real := clock.(realClock); real {
		return start
	}
	return clock.Now()
}
