package state

import "time"

// Index names an index the reaper and eviction take sandboxes from.
type Index int

// The indexes: a bucket's active and warm, the fleet's pre-started.
const (
	IndexActive Index = iota
	IndexWarm
	IndexPrewarm
)

// State is the state of the records in index i.
func (i Index) State() State {
	return [...]State{StateActive, StateWarm, StatePrewarm}[i]
}

// TouchEntry names one sandbox incarnation a replica served.
type TouchEntry struct {
	SandboxID   string
	Incarnation string
}

// Due names a bucket's index that holds sandboxes expired at a cutoff.
type Due struct {
	Bucket int
	Index  Index
}

// Counts are the fleet-wide pool sizes.
type Counts struct{ Active, Warm, Creating, Prewarm int64 }

// Idle is an active sandbox and its last activity.
type Idle struct {
	SandboxID string
	Seen      time.Time
}

// Entry is one sandbox of the overview: its record (no record yet while
// it is being created) and when it was last used.
type Entry struct {
	Record
	// Since is the last activity of an active sandbox, the release of a warm
	// one, the reservation deadline of one being created.
	Since time.Time
}

// Overview is the fleet's sandboxes by state, for the status page.
type Overview struct {
	Active, Warm []Entry
	// Creating carries only SandboxID, User and State (no record yet).
	Creating []Entry
}

// Replica is one replica's last heartbeat.
type Replica struct {
	Instance string
	Seen     time.Time
}
