// Package state is the fleet's state as the gateway sees it, apart from
// where it is kept: sandbox records and their states, the indexes the
// reaper and the freezer read, capability sums, reservations and the
// errors a store gives. The Redis code is in statedb; the router depends
// on these types only.
package state

import (
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// State of a sandbox record.
type State string

const (
	StateActive     State = "active"
	StateWarm       State = "warm"
	StateDestroying State = "destroying"
	// StatePrewarm: started before any thread asked, waiting in the prewarm
	// index to be claimed by a new thread (no user or thread yet).
	StatePrewarm State = "prewarm"
)

// Record is the Redis hash of one sandbox.
type Record struct {
	SandboxID   string
	User        string
	Thread      string
	Backend     string
	Incarnation string
	URL         string
	State       State
	CreatedAt   time.Time
	// Secret is the sandbox server's own credential (backend.Info.Secret),
	// kept here so every replica that reaches the sandbox can send it; ""
	// = the shared sandbox_api_key. Never logged or returned to a client.
	Secret string
	// Prewarm is the fingerprint of the spec a pre-started sandbox was
	// made from (backend.LabelPrewarm); "" for a thread's own sandbox.
	Prewarm string
	// Template names the template the sandbox was made from
	// (backend.LabelTemplate); "" = none.
	Template string
	// Capability opens this incarnation through a capability URL; "" until
	// one is first handed out (Store.Capability). Never log it.
	Capability string
	// PortHost is backend.Info.PortHost: "" = ports go through the
	// sandbox server's bridge.
	PortHost string

	// Frozen is when the freezer stopped the sandbox's processes (zero =
	// running); a replica thaws it under the lock before it routes to it.
	Frozen time.Time
}

// StateFrozen is no record state: it is how a record in StateActive with a
// freeze mark is shown (Shown). The mark lives beside the state (the
// sandbox keeps its place in the active index, its capacity and its
// idle clock), so a reader of State alone would show a frozen sandbox as
// active.
const StateFrozen State = "frozen"

// Shown is the state a person reads: StateFrozen for a frozen active
// record, State otherwise (a paused warm sandbox stays warm).
func (r Record) Shown() State {
	if r.State == StateActive && !r.Frozen.IsZero() {
		return StateFrozen
	}
	return r.State
}

// RecordFromInfo builds the record of a live sandbox.
func RecordFromInfo(info backend.Info, state State) Record {
	return Record{
		SandboxID:   info.SandboxID,
		User:        info.User,
		Thread:      info.Thread,
		Backend:     info.Backend,
		Incarnation: info.Incarnation,
		URL:         info.URL,
		State:       state,
		CreatedAt:   info.CreatedAt,
		Secret:      info.Secret,
		Prewarm:     prewarmOf(info),
		Template:    info.Labels[backend.LabelTemplate],
		PortHost:    info.PortHost,
	}
}

// prewarmOf is the spec fingerprint of a sandbox no thread has claimed
// (a claimed container keeps the label: its user says it was claimed).
func prewarmOf(info backend.Info) string {
	if info.User != "" {
		return ""
	}
	return info.Labels[backend.LabelPrewarm]
}

// Info is the backend view of the record.
func (r Record) Info() backend.Info {
	return backend.Info{
		SandboxID:   r.SandboxID,
		User:        r.User,
		Thread:      r.Thread,
		URL:         r.URL,
		Incarnation: r.Incarnation,
		Backend:     r.Backend,
		CreatedAt:   r.CreatedAt,
		Secret:      r.Secret,
		PortHost:    r.PortHost,
	}
}
