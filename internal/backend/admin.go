package backend

import (
	"context"
	"errors"
	"io"
	"time"
)

// The optional capabilities the operator CLI uses (via /admin/v1). A
// backend that lacks one is answered with ErrNotSupported.

// ErrNotSupported marks what this backend cannot tell or do (501).
var ErrNotSupported = errors.New("not supported by this sandbox backend")

// NotSupportedError is ErrNotSupported naming the feature and why, in
// words a client may read: it holds no id, path or secret, and the API's
// 501 shows it whole.
type NotSupportedError struct{ Feature, Why string }

func (e *NotSupportedError) Error() string {
	return e.Feature + " is not supported by this sandbox backend: " + e.Why
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Is(target error) bool { return target == ErrNotSupported }

// Unsupported is a NotSupportedError.
func Unsupported(feature, why string) error { return &NotSupportedError{Feature: feature, Why: why} }

// LogOptions select what Logs returns.
type LogOptions struct {
	// Follow keeps the stream open for new lines until ctx ends or the
	// sandbox stops.
	Follow bool
	// Tail is how many lines from the end to start with; <= 0 = all.
	Tail int
}

// LogStreamer is implemented by backends that keep a sandbox server's log.
type LogStreamer interface {
	Logs(ctx context.Context, info Info, opts LogOptions) (io.ReadCloser, error)
}

// Stats are a sandbox's resource use at one moment. CPU is cumulative, so
// a client samples twice for a rate (as top does).
type Stats struct {
	CPUSeconds  float64   `json:"cpu_seconds"`
	MemoryBytes int64     `json:"memory_bytes"`
	PIDs        int       `json:"pids"`
	At          time.Time `json:"at"`
}

// Statter is implemented by backends that can measure a sandbox.
type Statter interface {
	Stats(ctx context.Context, info Info) (Stats, error)
}

// Leftover is something a dead sandbox left behind (a stopped container, a
// log without a process), found by Pruner.
type Leftover struct {
	Kind      string `json:"kind"` // "container", "log", ...
	Name      string `json:"name"`
	SandboxID string `json:"sandbox_id,omitempty"`
}

// Pruner is implemented by backends whose dead sandboxes leave something
// behind. Leftovers lists only fleet's; Remove removes one of them.
type Pruner interface {
	Leftovers(ctx context.Context, fleet string) ([]Leftover, error)
	RemoveLeftover(ctx context.Context, l Leftover) error
}
