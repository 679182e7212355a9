package lease

import (
	"strconv"
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
	// Capability opens this incarnation through a capability URL; "" until
	// one is first handed out (Store.Capability). Never log it.
	Capability string
	capSum     string // the capability's index key (hex SHA-256)
	// Frozen is when the freezer stopped the sandbox's processes (zero =
	// running); a replica thaws it under the lock before it routes to it.
	Frozen time.Time
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
	}
}

// fields flattens the record for HSET (state is written by the scripts);
// seen_ms is now: a record being written is about to be routed to.
func (r Record) fields(now time.Time) []any {
	return []any{
		"user", r.User, "thread", r.Thread, "backend", r.Backend,
		"incarnation", r.Incarnation, "url", r.URL,
		"created_ms", strconv.FormatInt(r.CreatedAt.UnixMilli(), 10),
		"secret", r.Secret, "prewarm", r.Prewarm,
		"seen_ms", strconv.FormatInt(now.UnixMilli(), 10),
	}
}

// recordFromHash parses HGETALL output; ok is false for a missing record.
func recordFromHash(sid string, h map[string]string) (Record, bool) {
	if len(h) == 0 {
		return Record{}, false
	}
	ms, _ := strconv.ParseInt(h["created_ms"], 10, 64)
	return Record{
		SandboxID:   sid,
		User:        h["user"],
		Thread:      h["thread"],
		Backend:     h["backend"],
		Incarnation: h["incarnation"],
		URL:         h["url"],
		State:       State(h["state"]),
		CreatedAt:   time.UnixMilli(ms),
		Secret:      h["secret"],
		Prewarm:     h["prewarm"],
		Capability:  h["cap"],
		capSum:      h["cap_sum"],
		Frozen:      msTime(h["frozen"]),
	}, true
}

// msTime parses a unix-ms field; "" or garbage is the zero time.
func msTime(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// recordFromPairs parses the flat field/value array a script returns.
func recordFromPairs(sid string, pairs []any) (Record, bool) {
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		k, _ := pairs[i].(string)
		v, _ := pairs[i+1].(string)
		h[k] = v
	}
	return recordFromHash(sid, h)
}
