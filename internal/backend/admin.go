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
	CPUSeconds  float64 `json:"cpu_seconds"`
	MemoryBytes int64   `json:"memory_bytes"`
	// MemoryPeakBytes is the high-water mark and MemoryLimitBytes the
	// limit, where the backend knows them (the process backend's cgroups);
	// 0 = unknown or none.
	MemoryPeakBytes  int64 `json:"memory_peak_bytes,omitempty"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes,omitempty"`
	PIDs             int   `json:"pids"`
	// OOMKills counts the processes the kernel's OOM killer ended in the
	// sandbox since it started, where the backend can tell (the process
	// backend's memory cgroup; a kubernetes sandbox server's container
	// cgroup, ServerStats); 0 = none or unknown. The sampler publishes
	// an oom_killed event when it grows.
	OOMKills int64     `json:"oom_kills,omitempty"`
	At       time.Time `json:"at"`
}

// OOMWatcher is implemented by backends whose engine reports OOM kills as
// they happen (docker's "oom" events): WatchOOM calls fn for each kill in
// a sandbox of fleet until ctx ends or the engine's stream fails. The pool
// publishes an oom_killed event for each. A backend whose Stats carry
// OOMKills needs no watcher: the sampler reads them.
type OOMWatcher interface {
	WatchOOM(ctx context.Context, fleet string, fn func(info Info, at time.Time)) error
}

// Statter is implemented by backends that can measure a sandbox.
type Statter interface {
	Stats(ctx context.Context, info Info) (Stats, error)
}

// Meter measures one sandbox incarnation again and again, keeping what
// makes a sample cheap (open cgroup files) between samples.
type Meter interface {
	Sample(ctx context.Context) (Stats, error)
	Close()
}

// MeterOpener is implemented by backends whose sandboxes can be sampled
// every second at a small cost (pool.Sampler); the others' Statter is
// sampled less often.
type MeterOpener interface {
	OpenMeter(ctx context.Context, info Info) (Meter, error)
}

// LayerMeter is implemented by backends whose sandboxes have a writable
// layer of their own over their image (the process backend's image layer,
// a docker container's). LayerBytes is what it takes on disk; ok false
// when info's sandbox has none. It may walk a tree or ask an engine that
// does: the sampler calls it every few samples, not every one.
type LayerMeter interface {
	LayerBytes(ctx context.Context, info Info) (n int64, ok bool, err error)
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
