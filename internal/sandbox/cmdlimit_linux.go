package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/osthread"
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

// gateLine holds a jailed command's shell at its first line, before it runs
// or forks anything, until the server has lowered its RLIMIT_NPROC and
// written "go" on fd 3 (startLimited): a limit set after the shell ran on
// misses the children it forked meanwhile, and a fork bomb among them gets
// the server's budget. Go cannot set a child's rlimit between fork and exec,
// and RLIMIT_NPROC is per process: lowering the server's own would starve its
// threads. Any other answer (the server failed, the pipe closed) exits 126.
const gateLine = `read -r __sg_go <&3 && [ "$__sg_go" = go ] || exit 126; exec 3<&-; unset __sg_go
`

// limitedScript is script, gated by gateLine when commands get a limit.
func limitedScript(script string) string {
	if commandNPROC() == 0 {
		return script
	}
	return gateLine + script
}

// startLimited starts cmd, whose script came from limitedScript, and
// releases it once its process limit is in place; the pids cgroup bounds
// the sandbox as a whole regardless.
func startLimited(cmd *exec.Cmd) error {
	n := commandNPROC()
	if n == 0 {
		return osthread.Start(cmd)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("command gate: %w", err)
	}
	defer w.Close()
	cmd.ExtraFiles = []*os.File{r} // fd 3
	err = osthread.Start(cmd)
	_ = r.Close()
	if err != nil {
		return err
	}
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		// Closing the gate unanswered ends the shell before the command.
		_ = w.Close()
		_ = cmd.Wait()
		return fmt.Errorf("command process limit %d: %w", n, err)
	}
	if _, err := w.WriteString("go\n"); err != nil {
		_ = cmd.Wait()
		return fmt.Errorf("release command: %w", err)
	}
	return nil
}
