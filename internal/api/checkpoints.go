package api

import "time"

// Checkpoint describes one checkpoint of a thread's workspace.
type Checkpoint struct {
	ID        string    `json:"id"`
	Label     string    `json:"label,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Size is the bytes of its regular files (hard-linked ones included:
	// what a restore writes, not what the checkpoint adds on disk).
	Size int64 `json:"size"`
	// Files is its regular files; Linked of them are shared with the
	// previous checkpoint; Skipped is sockets and devices left out.
	Files   int `json:"files"`
	Linked  int `json:"linked"`
	Skipped int `json:"skipped"`
	// Method is how the files not linked were copied: reflink or copy.
	Method string `json:"method"`
}

// CheckpointList answers GET /threads/{thread}/checkpoints, newest first.
type CheckpointList struct {
	Thread      string       `json:"thread"`
	Method      string       `json:"method"`
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// CreateCheckpoint is the optional body of POST /threads/{thread}/checkpoints.
type CreateCheckpoint struct {
	Label string `json:"label"`
}

// RestoreCheckpoint is the optional body of POST
// /threads/{thread}/checkpoints/{id}/restore.
type RestoreCheckpoint struct {
	Force bool `json:"force"`
}

// Restored answers a restore.
type Restored struct {
	Restored Checkpoint `json:"restored"`
	Thread   string     `json:"thread"`
}

// Fork is the body of POST /threads/{thread}/fork: the new thread, and the
// checkpoint to start from (none: the current files).
type Fork struct {
	Checkpoint string `json:"checkpoint,omitempty"`
	Thread     string `json:"thread"`
}
