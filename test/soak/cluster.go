package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/backend/process"
)

// cluster is the system under test: one redis-server and the gateway
// replicas, all children of this process on loopback, sharing a data dir.
type cluster struct {
	cfg      config
	logf     func(string, ...any)
	dir      string // work dir: binary, data dir, logs
	bin      string
	dataDir  string
	redis    stateRedis
	replicas []*replica
	http     *http.Client
}

func newCluster(ctx context.Context, cfg config, logf func(string, ...any)) (_ *cluster, err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not found (Debian package redis-server; `make deps` installs it)")
	}
	dir, err := os.MkdirTemp("", "sandgate-soak-")
	if err != nil {
		return nil, err
	}
	c := &cluster{cfg: cfg, logf: logf, dir: dir, dataDir: filepath.Join(dir, "data"),
		http: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}}}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.bin, err = buildGateway(ctx, dir); err != nil {
		return nil, err
	}
	if c.redis, err = startStateRedis(ctx, cfg, dir, logf); err != nil {
		return nil, err
	}
	for i := range cfg.Replicas {
		r := &replica{idx: i, c: c}
		if r.port, err = freePort(); err != nil {
			return nil, err
		}
		r.url = "http://127.0.0.1:" + strconv.Itoa(r.port)
		c.replicas = append(c.replicas, r)
		if err := r.start(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// buildGateway builds ./cmd/gateway of this module into dir.
func buildGateway(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("find the module root: %v", err)
	}
	bin := filepath.Join(dir, "gateway")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gateway")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build gateway: %w\n%s", err, out)
	}
	return bin, nil
}

// close stops everything this run started: replicas, every sandbox in the
// data dir (and any sandbox process of this binary the state files missed),
// Redis; then removes the work dir unless asked to keep it.
func (c *cluster) close() {
	for _, r := range c.replicas {
		r.kill()
	}
	if c.bin != "" {
		if pb, err := process.New(process.Config{Binary: c.bin, StateDir: c.stateDir()}, discardLogger()); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if list, err := pb.List(ctx); err == nil {
				for _, info := range list {
					_ = pb.Destroy(ctx, info)
				}
			}
			cancel()
		}
		if procs, err := scanSandboxes(c.bin, c.dataDir); err == nil {
			for _, p := range procs {
				_ = syscall.Kill(-p.pid, syscall.SIGKILL)
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
	if c.redis != nil {
		c.redis.stop()
	}
	c.http.CloseIdleConnections()
	if c.cfg.Keep {
		c.logf("kept the work dir %s", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

func (c *cluster) stateDir() string { return filepath.Join(c.dataDir, "sandboxes", "process") }

// threadDir is the host directory of a thread's workspace.
func (c *cluster) threadDir(thread string) string {
	return filepath.Join(c.dataDir, "users", "default", "threads", thread, "user-data")
}

// replica is one gateway process; it can be killed and started again on
// the same port.
type replica struct {
	idx  int
	c    *cluster
	port int
	url  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (r *replica) args() []string {
	cfg := r.c.cfg
	return []string{
		"--listen", "127.0.0.1:" + strconv.Itoa(r.port),
		"--redis-url", r.c.redis.url(),
		"--data-dir", r.c.dataDir,
		"--max-sandboxes", "0",
		"--reconcile-interval", cfg.ReconcileInterval.String(),
		"--reconcile-grace", cfg.ReconcileGrace.String(),
		"--bucket-lease-ttl", cfg.BucketLeaseTTL.String(),
		"--instance", "soak-" + strconv.Itoa(r.idx),
		"--log-format", "json",
		"--log-level", "info",
	}
}

// start launches the replica (appending to its log) and waits until healthy.
func (r *replica) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(r.c.dir, fmt.Sprintf("replica-%d.log", r.idx)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(r.c.bin, r.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start replica %d: %w", r.idx, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", r.url+"/healthz", nil)
		if resp, err := r.c.http.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("replica %d exited at start; see %s", r.idx, logf.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %d not healthy in 20s; see %s", r.idx, logf.Name())
		}
	}
}

// kill is kill -9: no drain, no cleanup.
func (r *replica) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
