package sandbox

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	ossignal "os/signal"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// reapOrphans runs while ctx lives when this server is PID 1 (the process
// backend's jail): on every SIGCHLD, and every few seconds in case signals
// merged, it reaps the zombies reparented to it that no Wait of its own is
// owed. Elsewhere the init of the host or container reaps them.
func reapOrphans(ctx context.Context, log *slog.Logger) {
	if os.Getpid() != 1 {
		return
	}
	sigs := make(chan os.Signal, 1)
	ossignal.Notify(sigs, unix.SIGCHLD)
	tick := time.NewTicker(5 * time.Second)
	go func() {
		defer ossignal.Stop(sigs)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
			case <-tick.C:
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
