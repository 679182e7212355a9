// Package events carries sandbox lifecycle events between replicas: any
// replica publishes, every replica's watchers (the status page, a thread's
// provisioning stream) see them, and the last few are kept for a page that
// opens later. It knows Redis, not the pool or the backends.
package events

import "time"

// Type names a lifecycle step. The set is open (a backend may report its
// own steps); these are the ones Sandgate itself publishes.
type Type string

const (
	// Queued: a create waits for capacity under the hard cap.
	Queued Type = "queued"
	// Pulling: the backend fetches the image (Bytes of Total so far).
	Pulling Type = "pulling"
	// Starting: the backend creates the sandbox and waits for it to answer.
	Starting Type = "starting"
	// Ready: the sandbox answers; requests go through.
	Ready Type = "ready"
	// Failed: the create failed (Reason says why).
	Failed Type = "failed"
	// Released: the thread let its sandbox go warm.
	Released Type = "released"
	// Destroyed: the sandbox is gone (Reason: idle, client, evicted, ...).
	Destroyed Type = "destroyed"
)

// Event is one lifecycle step of one sandbox. Its JSON is what SSE clients
// receive.
type Event struct {
	Time      time.Time `json:"time"`
	Type      Type      `json:"type"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	User      string    `json:"user,omitempty"`
	Thread    string    `json:"thread,omitempty"`
	Backend   string    `json:"backend,omitempty"`
	// Replica is the instance that published it.
	Replica string `json:"replica,omitempty"`
	// Reason explains Failed and Destroyed; never a secret or a host path.
	Reason string `json:"reason,omitempty"`
	// Bytes and Total count a Pulling step's progress (Total 0: unknown).
	Bytes int64 `json:"bytes,omitempty"`
	Total int64 `json:"total,omitempty"`
}
