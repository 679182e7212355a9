// Package events keeps sandbox lifecycle events in one Redis Stream per
// fleet: any replica appends, every replica reads the stream once (Run)
// and fans it out to its followers, and a follower that reconnects, lags
// or moves to another replica replays what it missed by stream id, for a
// retention window. It knows Redis, not the pool or the backends.
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
	// Ready: the sandbox answers; requests go through. Cause says where it
	// came from (cold, warm, prewarm, adopted).
	Ready Type = "ready"
	// Failed: the create failed (Cause says why).
	Failed Type = "failed"
	// Frozen: the sandbox's processes were paused (Cause: idle, on_demand).
	Frozen Type = "frozen"
	// Thawed: a frozen sandbox runs again (Cause: on_demand, a request).
	Thawed Type = "thawed"
	// Checkpointed: a checkpoint of the thread's workspace was taken
	// (Checkpoint is its id).
	Checkpointed Type = "checkpointed"
	// Restored: the thread's workspace was put back to Checkpoint.
	Restored Type = "restored"
	// Forked: the thread was made a copy of thread From's workspace (its
	// Checkpoint, or its current state when Checkpoint is empty).
	Forked Type = "forked"
	// Released: the thread let its sandbox go warm.
	Released Type = "released"
	// Destroyed: the sandbox is gone (Cause: idle, client, evicted, ...).
	Destroyed Type = "destroyed"
	// OOMKilled: the kernel's OOM killer ended a process in the sandbox
	// (Cause: oom; Count: how many since the last such event), read from
	// the sandbox's memory cgroup or the engine's events.
	OOMKilled Type = "oom_killed"
	// EgressDenied: the egress proxy refused a connection of the sandbox
	// before anything left (Cause: the proxy's reason, e.g. not_allowed,
	// private_address; Host: what it asked for; Count: the refusals this
	// event stands for, at most one event per sandbox and window).
	EgressDenied Type = "egress_denied"
)

// Event is one lifecycle step of one sandbox. Its JSON is what SSE clients
// receive.
type Event struct {
	// ID is the event's stream id ("ms-seq"), set when it is read back; it
	// orders the fleet's events and is what a client resumes after.
	ID          string    `json:"id,omitempty"`
	Time        time.Time `json:"time"`
	Type        Type      `json:"type"`
	SandboxID   string    `json:"sandbox_id,omitempty"`
	Incarnation string    `json:"incarnation,omitempty"`
	User        string    `json:"user,omitempty"`
	Thread      string    `json:"thread,omitempty"`
	Backend     string    `json:"backend,omitempty"`
	// Template is the template a created sandbox was made from.
	Template string `json:"template,omitempty"`
	// Replica is the instance that published it.
	Replica string `json:"replica,omitempty"`
	// Cause says why the step happened (a destroy's reason, a ready's
	// origin); never a secret or a host path.
	Cause string `json:"cause,omitempty"`
	// Checkpoint and From name what Checkpointed, Restored and Forked
	// worked from.
	Checkpoint string `json:"checkpoint,omitempty"`
	From       string `json:"from,omitempty"`
	// Bytes and Total count a Pulling step's progress (Total 0: unknown).
	Bytes int64 `json:"bytes,omitempty"`
	Total int64 `json:"total,omitempty"`
	// Host is the host an EgressDenied connection asked for.
	Host string `json:"host,omitempty"`
	// Count is how many occurrences the event stands for (OOMKilled,
	// EgressDenied); 0 = one.
	Count int64 `json:"count,omitempty"`
}
