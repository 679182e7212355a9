// Package sandboxspec is the written contract between the gateway and the
// sandbox server: what crosses between them besides the AIO API itself
// (the server's binary and command line, headers, the activity probe, the
// environment's rules, the in-sandbox egress port and home). Both sides
// import it and nothing else of each other, so a change here is a change of
// the contract, seen by both; it imports only the standard library (the
// sandbox server stays lean). Where a backend binds its sockets into a
// sandbox is the backend's own choice, passed to the server by flag.
package sandboxspec

import (
	"strings"
	"time"
)

// ServerBinary is the sandbox server's own binary (cmd/sandgate-sandbox),
// which links none of the gateway's backends, clients or tracing: the
// process backend runs it when it sits beside the gateway binary, and the
// sandbox images keep it at ServerImagePath.
const ServerBinary = "sandgate-sandbox"

// ServerImagePath is where the images of deployments/sandbox-image keep
// ServerBinary; their io.sandgate.sandbox-server label names it for the
// docker backend, and the applecontainer backend, which reads no labels,
// starts it from there.
const ServerImagePath = "/" + ServerBinary

// ServerCommand is the subcommand of ServerBinary (and of the gateway
// binary, which still serves it) that runs the sandbox server.
const ServerCommand = "sandbox"

// The names of the server's flags that the backends pass (given as
// "--"+name; sandbox.Main documents them all).
const (
	FlagListen       = "listen"
	FlagListenFD     = "listen-fd"
	FlagRecordedFD   = "recorded-fd"
	FlagSecretFD     = "secret-fd"
	FlagSecretFile   = "secret-file"
	FlagHome         = "home"
	FlagMap          = "map"
	FlagMapRO        = "map-ro"
	FlagEgressSocket = "egress-socket"
	FlagUmask        = "umask"
)

// SecretHeader carries a sandbox's secret (or the shared sandbox_api_key)
// from the gateway to the sandbox: the all-in-one sandbox's API key header.
const SecretHeader = "X-Aio-Api-Key"

// VirtualWorkspace is the thread's workspace inside every sandbox
// (DeerFlow's layout), the server's default home.
const VirtualWorkspace = "/mnt/user-data/workspace"

// EgressPort is the loopback port inside a sandbox where its egress proxy
// answers (process and docker: bridged by the sandbox server to the Unix
// socket the gateway serves).
const EgressPort = 3128

// ActivityPath is the sandbox server's answer to "does anything run in
// you", in the data of its usual envelope. The gateway's freezer asks it
// before it stops an idle sandbox's processes, the reaper before it
// destroys one, a checkpoint restore before it swaps files under them.
const ActivityPath = "/v1/sandgate/activity"

// BusyIdleAfterParam is ActivityPath's query parameter (a Go duration; 0 =
// idleness never ends busy, only a stop does): the gateway's setting, so a
// sandbox image need not change for it to apply.
const BusyIdleAfterParam = "busy_idle_after"

// DefaultBusyIdleAfter is how long a running command may use no CPU and
// write no output before it stops counting as busy.
const DefaultBusyIdleAfter = 30 * time.Minute

// Activity is what ActivityPath answers. Commands counts the busy commands:
// running, not stopped and not stalled; Stalled the others, which keep
// nothing alive. Requests counts the server's requests in flight besides
// activity probes (the gateway's, from any replica): an open WebSocket
// terminal, an SSE stream, a command being waited for.
type Activity struct {
	Commands int   `json:"commands"`
	Stalled  int   `json:"stalled"`
	Requests int64 `json:"requests"`
}

// Running: a command runs, or a request other than the probe is served.
func (a Activity) Running() bool { return a.Commands > 0 || a.Requests > 0 }

// PortPrefix is the sandbox server's bridge into its own network
// namespace: any request to PortPrefix+"{port}/{path}" is forwarded to
// 127.0.0.1:{port}/{path} inside the sandbox (query kept), where the
// process jail (only lo), docker's network none and a Pod's loopback
// leave nothing else to reach it by. Outside /v1, so no AIO endpoint can
// ever collide with it; it needs the secret like every other route.
const PortPrefix = "/sandgate/port/"

// PortClosed is the message of the 502 (code "port_closed") for a port
// nothing listens on, the bridge's and, for a port dialled directly, the
// gateway's alike.
func PortClosed(port string) string { return "nothing listens on port " + port + " in the sandbox" }

// PortPath is the bridge's path for port (ValidPort) without the
// forwarded path: PortPath("3000") + "/index.html".
func PortPath(port string) string { return PortPrefix + port }

// ValidPort reports whether s is a TCP port, 1-65535, written plainly (no
// sign, no leading zero), the one spelling both sides accept. It
// allocates nothing: the gateway checks it on every port request.
func ValidPort(s string) bool {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

// FreezePath (POST) has the sandbox server stop, with SIGSTOP, every
// process of its sandbox but itself, and answer once all of them are
// stopped (Freeze in the data of its usual envelope): the freezer of a
// backend that has none of its own (Kubernetes). Which processes are the
// sandbox's: as PID 1 of a PID namespace (a container) every process in
// it, daemonised and reparented ones too; otherwise only the server's own
// descendants. One already stopped (the tenant's `kill -STOP`) is left
// as it is. The server itself keeps serving, so a request other than
// ThawPath is answered too (a command it starts runs); the gateway thaws
// first. A freeze of a frozen sandbox stops what started since.
const FreezePath = "/v1/sandgate/freeze"

// ThawPath (POST) continues, with SIGCONT, what FreezePath stopped (and
// still is the same process); a thaw of a running sandbox does nothing.
const ThawPath = "/v1/sandgate/thaw"

// Freeze is what FreezePath and ThawPath answer: whether the sandbox is
// frozen now, and how many processes the freeze holds stopped (after a
// thaw: how many it continued).
type Freeze struct {
	Frozen    bool `json:"frozen"`
	Processes int  `json:"processes"`
}

// StatsPath (GET) is the sandbox's resource use, measured by the sandbox
// server (Stats in the data of its usual envelope): for a backend that
// has no container statistics of its own (Kubernetes).
const StatsPath = "/v1/sandgate/stats"

// The sources of Stats: the server's own cgroup (its container's, when
// it is the container's PID 1), or the sum over its process tree in /proc.
const (
	StatsCgroupV2 = "cgroup2"
	StatsCgroupV1 = "cgroup1"
	StatsProc     = "proc"
)

// Stats is what StatsPath answers. CPUSeconds is cumulative (user and
// system; a client samples twice for a rate), MemoryBytes what the
// sandbox holds now (a cgroup's charge, with page cache; or the sum of
// the processes' resident sets), PIDs how many processes it has. Source
// says which of StatsCgroupV2, StatsCgroupV1, StatsProc measured it.
// OOMKills counts the processes the kernel's OOM killer ended in the
// cgroup since it was made (its oom_kill: memory.events, or v1's
// memory.oom_control); absent: none, or a StatsProc source, which cannot
// tell.
type Stats struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	MemoryBytes int64   `json:"memory_bytes"`
	PIDs        int     `json:"pids"`
	Source      string  `json:"source"`
	OOMKills    int64   `json:"oom_kills,omitempty"`
}

// KeepEnvVar names the variable through which a launcher lists, comma
// separated, variables it set on purpose (configured sandbox env) that must
// survive stripping even if their names look secret.
const KeepEnvVar = "SANDGATE_KEEP_ENV"

// secretMarkers are the name fragments that make an inherited variable look
// like a credential; such variables never reach a sandbox shell.
var secretMarkers = []string{"KEY", "SECRET", "TOKEN", "PASS", "CREDENTIAL"}

// IsSecretName reports whether an environment variable name looks secret.
func IsSecretName(name string) bool {
	upper := strings.ToUpper(name)
	for _, m := range secretMarkers {
		if strings.Contains(upper, m) {
			return true
		}
	}
	return false
}

// StripSecrets returns env (KEY=VALUE entries) without secret-looking
// variables, except those named in keep.
func StripSecrets(env []string, keep map[string]bool) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if IsSecretName(name) && !keep[name] {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// CallerHeader names, to the sandbox server, who sent a data-plane request
// through the gateway: the principal's user (an API key's name, a token's
// subject), or CallerCapability+":"+owner for the holder of a capability
// URL, which names no principal. The gateway's proxy removes a client's
// copy and sets its own on every request it forwards, so the server can
// trust it exactly as far as it trusts SecretHeader's sender; a request
// without it (a direct call, a test) records no caller.
const CallerHeader = "X-Sandgate-Caller"

// CallerCapability prefixes the caller of a capability URL request (":"
// never appears in a user name, so no user can pass for one).
const CallerCapability = "capability"

// CommandsPath (GET) is the sandbox server's record of the commands that
// ended in it, oldest first (CommandLog in the data of its usual
// envelope): what ran, for whom and how it ended, never its output. The
// server keeps the last MaxCommandRecords in memory and writes each one
// to its log as a "command ended" line as well, so `gateway sandboxes
// logs` shows them in order with its other lines.
const CommandsPath = "/v1/sandgate/commands"

// CommandsLimitParam is CommandsPath's query parameter: only the last N
// records (absent or 0 = all it keeps).
const CommandsLimitParam = "limit"

// MaxCommandRecords bounds the records a sandbox server keeps; older ones
// are dropped (counted in CommandLog.Dropped).
const MaxCommandRecords = 256

// MaxRecordedCommand bounds the command text a record keeps, in bytes;
// CommandRecord.CommandBytes tells the whole length.
const MaxRecordedCommand = 1024

// CommandRecord is one command that ended. Status is how it ended
// (completed: it exited by itself, with ExitCode; hard_timeout: its
// hard_timeout killed it; terminated: a kill request or the end of its
// session or of the server did), ExitCode its exit status (128+signal
// when killed). OutputBytes counts what it wrote to stdout and stderr,
// including what the output cap dropped. Who is CallerHeader's value,
// "" when the request had none.
type CommandRecord struct {
	Seq          uint64    `json:"seq"`
	CommandID    string    `json:"command_id"`
	SessionID    string    `json:"session_id"`
	Command      string    `json:"command"`
	CommandBytes int       `json:"command_bytes"`
	Who          string    `json:"who"`
	Status       string    `json:"status"`
	ExitCode     int       `json:"exit_code"`
	StartedAt    time.Time `json:"started_at"`
	DurationMS   int64     `json:"duration_ms"`
	OutputBytes  int64     `json:"output_bytes"`
}

// CommandLog is what CommandsPath answers: the records kept, oldest
// first, and how many older ones were dropped to keep the bound.
type CommandLog struct {
	Records []CommandRecord `json:"records"`
	Dropped uint64          `json:"dropped"`
}
