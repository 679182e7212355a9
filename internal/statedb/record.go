package statedb

import (
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// fields flattens the record for HSET (state is written by the scripts);
// seen_ms is now: a record being written is about to be routed to.
func fields(r state.Record, now time.Time) []any {
	return []any{
		"user", r.User, "thread", r.Thread, "backend", r.Backend,
		"incarnation", r.Incarnation, "url", r.URL,
		"created_ms", strconv.FormatInt(r.CreatedAt.UnixMilli(), 10),
		"secret", r.Secret, "prewarm", r.Prewarm, "template", r.Template,
		"port_host", r.PortHost,
		"seen_ms", strconv.FormatInt(now.UnixMilli(), 10),
	}
}

// recordFromHash parses HGETALL output; ok is false for a missing record.
func recordFromHash(sid string, h map[string]string) (state.Record, bool) {
	if len(h) == 0 {
		return state.Record{}, false
	}
	ms, _ := strconv.ParseInt(h["created_ms"], 10, 64)
	return state.Record{
		SandboxID:   sid,
		User:        h["user"],
		Thread:      h["thread"],
		Backend:     h["backend"],
		Incarnation: h["incarnation"],
		URL:         h["url"],
		State:       state.State(h["state"]),
		CreatedAt:   time.UnixMilli(ms),
		Secret:      h["secret"],
		Prewarm:     h["prewarm"],
		Template:    h["template"],
		Capability:  h["cap"],
		PortHost:    h["port_host"],
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
func recordFromPairs(sid string, pairs []any) (state.Record, bool) {
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		k, _ := pairs[i].(string)
		v, _ := pairs[i+1].(string)
		h[k] = v
	}
	return recordFromHash(sid, h)
}
