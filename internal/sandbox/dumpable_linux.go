package sandbox

import (
	"fmt"
	"syscall"
)

// prSetDumpable is PR_SET_DUMPABLE from <linux/prctl.h>.
const prSetDumpable = 4

// undumpable makes this process non-dumpable: code running as the same uid
// (the commands this server runs) can then neither ptrace it nor read its
// /proc/<pid>/mem, environ or fd, where the secret lives. execve resets the
// flag, so the commands themselves run normally.
func undumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}
