package sandbox

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	ossignal "os/signal"
	"strconv"

	"golang.org/x/sys/unix"
)

// reapOrphans runs while ctx lives when this server is PID 1 (the process
// backend's jail): on every SIGCHLD it reaps the zombies reparented to it
// that no Wait of its own is owed. Elsewhere the init of the host or
// container reaps them. No timer: merged signals lose nothing, as each pass
// reaps every zombie there is and a signal sent during a pass waits in the
// channel for the next; the kernel also signals PID 1 when it inherits a
// zombie. A timer would wake every idle sandbox of the host for nothing
// (5,000 sandboxes at 5 s: 1,000 wakeups a second).
func reapOrphans(ctx context.Context, log *slog.Logger) {
	if os.Getpid() != 1 {
		return
	}
	sigs := make(chan os.Signal, 1)
	ossignal.Notify(sigs, unix.SIGCHLD)
	go func() {
		defer ossignal.Stop(sigs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
			}
			if n := reapOnce(); n > 0 {
				log.Debug("reaped orphans", "count", n)
			}
		}
	}()
}

// reapOnce reaps every zombie child of this process that is not its own.
func reapOnce() int {
	spawning.Lock()
	defer spawning.Unlock()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || owned(pid) || !orphanZombie(pid) {
			continue
		}
		if got, err := unix.Wait4(pid, nil, unix.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

// orphanZombie reports whether pid is a zombie whose parent is this PID 1.
func orphanZombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(stat[i+1:])
	return len(f) > 1 && string(f[0]) == "Z" && string(f[1]) == "1"
}
