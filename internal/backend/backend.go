// Package backend defines how sandboxes are made: the Backend contract every
// runtime implements (process, docker, kubernetes, remote, applecontainer) and
// the pieces they share (identity labels, thread mounts, readiness wait).
package backend

import (
	"context"
	"errors"
	"time"
)

// Backend creates and finds sandboxes. Implementations hold no lease state:
// the pool decides who owns what; a backend only answers for its runtime.
type Backend interface {
	// Create starts a sandbox for spec and returns once it answers
	// GET {url}/v1/sandbox with 200, or ctx ends.
	Create(ctx context.Context, spec Spec) (Info, error)
	// Destroy stops the sandbox. Idempotent: an unknown sandbox is nil.
	Destroy(ctx context.Context, info Info) error
	// Alive reports whether this incarnation still runs, cheaply and without
	// calling into the sandbox's API.
	Alive(ctx context.Context, info Info) (bool, error)
	// Discover finds a running, ready sandbox by id, started by any process.
	Discover(ctx context.Context, sandboxID string) (Info, bool, error)
	// List returns every sandbox this backend manages, for reconciliation.
	List(ctx context.Context) ([]Info, error)
}

// Mount binds a host directory into the sandbox at a virtual path.
type Mount struct {
	HostPath      string `yaml:"host_path" json:"host_path"`
	ContainerPath string `yaml:"container_path" json:"container_path"`
	ReadOnly      bool   `yaml:"read_only" json:"read_only"`
}

// Spec is what a sandbox is created from.
type Spec struct {
	SandboxID string
	User      string
	Thread    string
	Mounts    []Mount
	// Env is set in the sandbox as given; values are secrets as far as logs go.
	Env    map[string]string
	Labels map[string]string
	// Secret is this sandbox's own credential, minted by the pool. A backend
	// that runs Sandgate's sandbox server delivers it through a channel code
	// in the sandbox cannot read (an inherited pipe, a file the server
	// removes before serving) and returns it in Info.Secret; one that cannot
	// (a third-party image) returns an empty Info.Secret, and the gateway
	// sends the shared sandbox_api_key instead. Never logged.
	Secret string
	// Egress is the sandbox's egress policy (zero = proxy, empty allow-list).
	Egress Egress
	// Template is what the sandbox is made from besides the backend's
	// configuration (zero = that configuration alone).
	Template Template
}

// Template is a template (config `templates`) as one backend runs it. Its
// zero fields leave the backend's configured values: a gateway without
// templates sends the zero Template.
type Template struct {
	// Name labels the sandbox (LabelTemplate); views show it.
	Name string
	// Image is the container image reference (docker, kubernetes,
	// applecontainer); the process backend runs RootFS instead.
	Image string
	// RootFS is an imported image's read-only root (imagestore) that the
	// process backend's jail shows instead of its configured system root.
	RootFS string
	// RootEnv is RootFS's image environment (KEY=VALUE, PATH first among
	// them): the base of the commands' environment, as process.Config.SystemEnv.
	RootEnv []string
	// Memory caps the sandbox's memory in bytes (0 = the backend's limit).
	Memory int64
}

// Info describes one running sandbox incarnation.
type Info struct {
	SandboxID string
	User      string
	Thread    string
	URL       string
	// Incarnation tells a replacement with the same SandboxID from the old
	// one: a container id, a Pod UID, a pid plus its start time.
	Incarnation string
	Backend     string
	Labels      map[string]string
	CreatedAt   time.Time
	// Secret is what the sandbox server requires in sandboxspec.SecretHeader on every
	// request; "" = none of its own (the shared key applies). Discover and
	// List return it too, so a replica that adopts the sandbox after Redis
	// lost its record can still reach it. Never logged or shown to clients.
	Secret string
	// PortHost is where the sandbox's own ports are dialled, for an image
	// without Sandgate's server (a "TCP image": docker without the
	// server label, kubernetes without kubernetes_server): the
	// container's or Pod's address. "" = its ports go through the sandbox
	// server's bridge (sandboxspec.PortPrefix), which reaches its
	// loopback.
	PortHost string
}

// ErrUnavailable marks a backend that cannot be reached (engine down, API
// server gone); callers answer 503 rather than 502.
var ErrUnavailable = errors.New("backend unavailable")

// IncarnationWatcher is implemented by backends that learn at once when a
// sandbox incarnation ends or is on its way out (kubernetes: its Pod
// informer sees the deletion). The pool drops its cached route to it, so
// no request follows a route to a going Pod, or to the next Pod at its
// address, for the rest of cache_ttl. fn must not block.
type IncarnationWatcher interface {
	OnEnded(fn func(sandboxID, incarnation string))
}

// Freezer is implemented by backends that can freeze a sandbox while it sits
// in the warm pool (pool.Config.PauseWarm) and thaw it on reclaim. A paused
// sandbox is still Alive.
type Freezer interface {
	Freeze(ctx context.Context, info Info) error
	Thaw(ctx context.Context, info Info) error
}
