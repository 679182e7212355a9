package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Redis is a real redis-server child process on a loopback port.
type Redis struct {
	t    testing.TB
	Port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts a fresh redis-server for this test and stops it at cleanup.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	_, err := exec.LookPath("redis-server")
	Require(t, err == nil, "redis-server")
	r := &Redis{t: t, Port: FreePort(t), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// URL is the redis:// URL of this server.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Addr is host:port.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// Start (re)starts the server on the same port and waits until it accepts.
func (r *Redis) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", r.Addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("redis-server did not start on %s", r.Addr())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stop kills the server (SIGKILL: a crash, not a clean shutdown).
func (r *Redis) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Restore restarts the server on the RDB file at path (a state saved by
// another server), as a restore from a backup would.
func (r *Redis) Restore(path string) {
	r.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatalf("read %s: %v", path, err)
	}
	r.Stop()
	if err := os.WriteFile(filepath.Join(r.dir, "dump.rdb"), data, 0o600); err != nil {
		r.t.Fatalf("write dump.rdb: %v", err)
	}
	r.Start()
}
