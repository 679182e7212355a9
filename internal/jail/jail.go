// Package jail runs a program in a sandbox of its own on Linux without a
// container engine: new user, mount, PID, network, IPC, UTS and cgroup
// namespaces, a root of its own (pivot_root) built from read-only system
// directories (the host's, or an image's: Spec.SystemRoot) and the
// sandbox's bind mounts, an unprivileged uid inside, Landlock, a seccomp
// filter and resource limits. It is what the process backend's default
// isolation (process_isolation: namespaces) is made of.
//
// The parent side (Command) prepares the clone flags, the id maps and the
// mount sources; the child side (Init, the `gateway sandbox-init`
// subcommand) runs as PID 1 of the new PID namespace, builds the root,
// locks itself down and starts the sandbox server, reaping every orphan
// until the server exits.
package jail

// Limits bound one sandbox. The zero value of each field is its documented
// default; a negative value means no limit.
type Limits struct {
	// Memory in bytes for the whole sandbox: a cgroup's memory limit where
	// the gateway may write one, else RLIMIT_AS on every process. 0 = 2 GiB.
	Memory int64 `json:"memory"`
	// Processes (and threads) the sandbox may run at once: the pids
	// cgroup, and RLIMIT_NPROC of the sandbox's own host uid. 0 = 512.
	Processes int `json:"processes"`
	// OpenFiles per process (RLIMIT_NOFILE). 0 = 4096.
	OpenFiles int `json:"open_files"`
	// FileSize is the largest file a process may write (RLIMIT_FSIZE).
	// 0 = 8 GiB.
	FileSize int64 `json:"file_size"`
	// TmpSize bounds the private /tmp (a tmpfs). 0 = 512 MiB.
	TmpSize int64 `json:"tmp_size"`
}

// ServerThreads is the headroom above Limits.Processes that the sandbox
// server keeps for itself: it is PID 1 of the sandbox and a Go program,
// which starts OS threads as it needs them, so its commands are held to
// Processes (CommandProcesses) and a fork bomb among them cannot leave the
// server unable to serve, or kill the sandbox by killing PID 1.
const ServerThreads = 64

// Documented defaults of Limits.
const (
	DefaultMemory    = 2 << 30
	DefaultProcesses = 512
	DefaultOpenFiles = 4096
	DefaultFileSize  = 8 << 30
	DefaultTmpSize   = 512 << 20
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	l.Memory = orDefault(l.Memory, DefaultMemory)
	l.Processes = orDefault(l.Processes, DefaultProcesses)
	l.OpenFiles = orDefault(l.OpenFiles, DefaultOpenFiles)
	l.FileSize = orDefault(l.FileSize, DefaultFileSize)
	l.TmpSize = orDefault(l.TmpSize, DefaultTmpSize)
	return l
}

func orDefault[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// sandboxProcesses is the sandbox's whole process and thread budget (the
// pids cgroup and the server's RLIMIT_NPROC): the commands' plus the
// server's headroom; negative = none.
func (l Limits) sandboxProcesses() int64 {
	if l.Processes < 0 {
		return -1
	}
	return int64(l.Processes) + ServerThreads
}
