package api

import "time"

// Sandbox is the control plane's view of one sandbox (PUT and GET
// /threads/{thread}/sandbox, and the new thread of a fork).
type Sandbox struct {
	SandboxID string `json:"sandbox_id"`
	Thread    string `json:"thread"`
	User      string `json:"user"`
	Backend   string `json:"backend"`
	// Template names the template the sandbox was made from (absent: none).
	Template string `json:"template,omitempty"`
	State    string `json:"state"`
	Outcome  string `json:"outcome,omitempty"`
	URL      string `json:"url"`
	// SandboxURL is the capability URL: it needs no other credential.
	SandboxURL string    `json:"sandbox_url"`
	CreatedAt  time.Time `json:"created_at"`
	// Frozen: the freezer stopped its processes while it was idle (GET
	// only); its next request thaws it.
	Frozen bool `json:"frozen,omitempty"`
	// Data is the thread's data on the gateway host (GET only; absent when
	// the backend keeps it elsewhere).
	Data *ThreadData `json:"data,omitempty"`
	// Metadata is what the thread's create stored (CreateSandbox.Metadata).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// CreateSandbox is the optional body of PUT /threads/{thread}/sandbox. It
// is stored with the thread: every later incarnation is made from it, and
// a body that changes it replaces a running sandbox made from another (the
// thread's files stay). No body keeps what is stored; {} resets it.
type CreateSandbox struct {
	// Template names one of GET /api/templates; "" = the default.
	Template string `json:"template,omitempty"`
	// Env is set in the sandbox over the template's.
	Env map[string]string `json:"env,omitempty"`
	// Memory in bytes, at most the template's max_memory; 0 = the template's.
	Memory int64 `json:"memory,omitempty"`
	// Metadata is the client's own, shown with the sandbox.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Egress (admins only) overrides the egress policy, as on the
	// provisioner API.
	Egress *Egress `json:"egress,omitempty"`
}

// Template is one template of GET /api/templates. Env values and host
// paths are the operator's and never shown.
type Template struct {
	Name    string `json:"name"`
	Default bool   `json:"default"`
	// Image is the container image reference, when the template names one.
	Image string `json:"image,omitempty"`
	// Memory is its sandboxes' memory limit in bytes (0 = the backend's);
	// MaxMemory the most a create may ask for.
	Memory    int64    `json:"memory,omitempty"`
	MaxMemory int64    `json:"max_memory,omitempty"`
	EnvNames  []string `json:"env_names,omitempty"`
	// Egress is the mode of its own egress policy, absent = the fleet's.
	Egress  string `json:"egress,omitempty"`
	Prewarm int    `json:"prewarm,omitempty"`
}

// TemplateList answers GET /api/templates.
type TemplateList struct {
	Default   string     `json:"default,omitempty"`
	Templates []Template `json:"templates"`
}

// ThreadData is a thread's data on the gateway host as last measured.
type ThreadData struct {
	Bytes       int64     `json:"bytes"`
	Quota       int64     `json:"quota,omitempty"`
	OverQuota   bool      `json:"over_quota"`
	Approximate bool      `json:"approximate"`
	MeasuredAt  time.Time `json:"measured_at"`
}

// Frozen answers POST /threads/{thread}/sandbox/freeze.
type Frozen struct {
	Frozen bool   `json:"frozen"`
	Thread string `json:"thread"`
}

// SandboxRecord is one sandbox as the operator API lists it (/admin/v1).
// No URL: it may be a host path (a Unix socket), and an operator reaches
// sandboxes through the gateway.
type SandboxRecord struct {
	SandboxID string    `json:"sandbox_id"`
	User      string    `json:"user"`
	Thread    string    `json:"thread"`
	Backend   string    `json:"backend"`
	Template  string    `json:"template,omitempty"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
}

// AdminSandbox is a sandbox of the list, and on inspect its liveness and
// data.
type AdminSandbox struct {
	SandboxRecord
	// Alive and Data are answered by inspect only.
	Alive *bool       `json:"alive,omitempty"`
	Data  *ThreadData `json:"data,omitempty"`
}

// AdminSandboxList answers GET /admin/v1/sandboxes.
type AdminSandboxList struct {
	Count     int            `json:"count"`
	Fleet     string         `json:"fleet"`
	Sandboxes []AdminSandbox `json:"sandboxes"`
}

// AdminDestroyed answers DELETE /admin/v1/sandboxes/{id}.
type AdminDestroyed struct {
	Destroyed bool   `json:"destroyed"`
	SandboxID string `json:"sandbox_id"`
}

// ThreadRemoved answers DELETE /admin/v1/users/{user}/threads/{thread}.
// Data and Checkpoints are "removed", "none", or (data only) "elsewhere":
// the backend keeps the thread's data where the gateway cannot reach it.
type ThreadRemoved struct {
	// Checkpoints is absent when the gateway keeps no checkpoints.
	Checkpoints      string `json:"checkpoints,omitempty"`
	Data             string `json:"data"`
	SandboxDestroyed bool   `json:"sandbox_destroyed"`
	Thread           string `json:"thread"`
	User             string `json:"user"`
}

// Stats is one sample of a sandbox's resource use.
type Stats struct {
	CPUSeconds  float64   `json:"cpu_seconds"`
	MemoryBytes int64     `json:"memory_bytes"`
	PIDs        int       `json:"pids"`
	At          time.Time `json:"at"`
	// DiskEgress is the answering replica's sampler's latest figures; absent
	// for a sandbox it does not sample.
	DiskEgress
}

// StatsRow is one sandbox of GET /admin/v1/stats.
type StatsRow struct {
	SandboxRecord
	// Stats is nil when there are no figures.
	*Stats
	// Error says why this sandbox has no figures (gone meanwhile, engine
	// busy); the other rows are still served.
	Error string `json:"error,omitempty"`
}

// StatsList answers GET /admin/v1/stats; Supported is false when the
// backend cannot tell.
type StatsList struct {
	Count     int        `json:"count"`
	Sandboxes []StatsRow `json:"sandboxes"`
	Supported bool       `json:"supported"`
}

// PruneReport answers GET (what would go) and POST (removed) /admin/v1/prune.
type PruneReport struct {
	Fleet  string   `json:"fleet"`
	DryRun bool     `json:"dry_run"`
	Items  []Pruned `json:"items"`
}

// Pruned is one leftover of this fleet.
type Pruned struct {
	Kind      string    `json:"kind"` // "sandbox" (running, no record) or a backend's leftover kind
	Name      string    `json:"name"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	User      string    `json:"user,omitempty"`
	Thread    string    `json:"thread,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Error     string    `json:"error,omitempty"` // removing it failed; the rest went on
}

// MetricsSample is one sample of a sandbox's resource use
// (GET /threads/{thread}/sandbox/metrics, docs/OBSERVABILITY.md).
type MetricsSample struct {
	At         time.Time `json:"at"`
	CPUSeconds float64   `json:"cpu_seconds"`
	// CPUPercent is the CPU used since the previous sample, in percent of
	// one core (200 = two cores busy); absent on the first sample.
	CPUPercent       *float64 `json:"cpu_percent,omitempty"`
	MemoryBytes      int64    `json:"memory_bytes"`
	MemoryPeakBytes  int64    `json:"memory_peak_bytes,omitempty"`
	MemoryLimitBytes int64    `json:"memory_limit_bytes,omitempty"`
	PIDs             int      `json:"pids"`
	DiskEgress
}

// DiskEgress is a sandbox's disk and egress figures: measured by the
// gateway, not the backend's sample (docs/OBSERVABILITY.md). Absent = none
// or not measured here.
type DiskEgress struct {
	// DataBytes is the thread's data on the gateway host, and LayerBytes
	// the sandbox's writable image layer (the process backend keeps it in
	// the thread's data, so DataBytes counts it too; docker's is the
	// container's own). Measured every few samples.
	DataBytes  int64 `json:"data_bytes,omitempty"`
	LayerBytes int64 `json:"layer_bytes,omitempty"`
	// EgressSentBytes and EgressReceivedBytes count what the sandbox sent
	// and got through the gateway's egress proxy since its proxy opened
	// (or this gateway started).
	EgressSentBytes     int64 `json:"egress_sent_bytes,omitempty"`
	EgressReceivedBytes int64 `json:"egress_received_bytes,omitempty"`
}

// SandboxMetrics is a sandbox's latest sample and its recent history,
// oldest first, as kept by the replica that answers.
type SandboxMetrics struct {
	SandboxID       string          `json:"sandbox_id"`
	Thread          string          `json:"thread"`
	Backend         string          `json:"backend"`
	IntervalSeconds float64         `json:"interval_seconds"`
	Latest          *MetricsSample  `json:"latest,omitempty"`
	History         []MetricsSample `json:"history"`
}
