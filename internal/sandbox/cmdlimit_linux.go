package sandbox

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/jail"
)

// commandNPROC is the RLIMIT_NPROC a command gets in the process backend's
// jail: the server's own minus the headroom it keeps for its threads
// (jail.ServerThreads); 0 = leave commands as they are (not in a jail).
var commandNPROC = sync.OnceValue(func() uint64 {
	var own unix.Rlimit
	if os.Getpid() != 1 || unix.Getrlimit(unix.RLIMIT_NPROC, &own) != nil ||
		own.Max == unix.RLIM_INFINITY || own.Max <= jail.ServerThreads {
		return 0
	}
	return own.Max - jail.ServerThreads
})

// limitCommand holds a just-started command, and so everything it forks, to
// the commands' process budget, before its script has run a line of the
// caller's code in practice (bash parses first); the pids cgroup bounds the
// sandbox as a whole regardless.
func limitCommand(pid int) {
	if n := commandNPROC(); n > 0 {
		_ = unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil)
	}
}
