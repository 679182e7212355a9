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
	"strings"
	"syscall"
	"text/template"
	"time"
)

// service is a child process in its own process group: a Ctrl-C on the
// terminal reaches only the bench, which then stops its services in order
// (the gateway must outlive the sandbox it reaps).
type service struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startService runs argv with stdout and stderr appended to logPath.
func startService(name, logPath string, argv ...string) (*service, error) {
	return startServiceEnv(name, logPath, nil, argv...)
}

// startServiceEnv is startService with env (KEY=VALUE) added to ours.
func startServiceEnv(name, logPath string, env []string, argv ...string) (*service, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &service{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	return s, nil
}

// pid is the service's process id (and, with Setpgid, its process group).
func (s *service) pid() int { return s.cmd.Process.Pid }

// stop sends sig to the group, waits up to grace, then kills the group
// (nginx's workers too, should the master be gone first).
func (s *service) stop(sig syscall.Signal, grace time.Duration) {
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, sig)
	select {
	case <-s.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.done
}

// waitUp polls until check succeeds, the service exits or ctx ends.
func (s *service) waitUp(ctx context.Context, bound time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited during startup: %s", s.name, s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("%s not up: %w (last: %v)", s.name, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func dialCheck(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
}

func httpCheck(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := setupClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
		}
		return nil
	}
}

// setupClient makes the setup and sanity-check requests (not measured).
var setupClient = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: time.Minute}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func startRedis(ctx context.Context, dir string) (*service, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	s, err := startService("redis-server", filepath.Join(dir, "redis.log"), "redis-server", "--port", port,
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return nil, "", err
	}
	if err := s.waitUp(ctx, 10*time.Second, dialCheck(addr)); err != nil {
		s.stop(syscall.SIGKILL, 0)
		return nil, "", err
	}
	return s, addr, nil
}

// nginxConfig is what the reference proxy's configuration is rendered from.
type nginxConfig struct {
	Dir      string // prefix: pid, error log and temp paths (Debian's are under /var)
	Listen   string // host:port
	Upstream string // the sandbox, host:port
	Prefix   string // proxied path prefix, e.g. /threads/bench/
	SSEPath  string // exact path of the streaming endpoint (unbuffered)
}

// nginxTemplate is a reverse proxy tuned as one would for this job: upstream
// keepalive, no per-connection request limits (Go's server has none), no
// access log. Responses stream unbuffered through a 64 KB buffer, as the
// gateway streams them: nginx's default buffering measured 0.4-0.6x of this
// on 1 MiB downloads here and the same on small ones. The exec stream gets
// its own location for its long read timeout.
var nginxTemplate = template.Must(template.New("nginx").Parse(`worker_processes 2;
daemon off;
user root;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events {
  worker_connections 4096;
}
http {
  access_log off;
  client_body_temp_path {{.Dir}}/client_body;
  proxy_temp_path {{.Dir}}/proxy;
  fastcgi_temp_path {{.Dir}}/fastcgi;
  uwsgi_temp_path {{.Dir}}/uwsgi;
  scgi_temp_path {{.Dir}}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  upstream sandbox {
    server {{.Upstream}};
    keepalive 256;
    keepalive_requests 1000000;
  }
  server {
    listen {{.Listen}};
    location {{.Prefix}} {
      proxy_pass http://sandbox/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_buffer_size 64k;
      proxy_buffers 4 64k;
    }
    location = {{.Prefix}}{{.SSEPath}} {
      proxy_pass http://sandbox/{{.SSEPath}};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 1h;
    }
  }
}
`))

func renderNginx(c nginxConfig) (string, error) {
	if !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") || strings.HasPrefix(c.SSEPath, "/") {
		return "", fmt.Errorf("nginx config: prefix %q must be /.../ and SSE path %q relative", c.Prefix, c.SSEPath)
	}
	var b strings.Builder
	if err := nginxTemplate.Execute(&b, c); err != nil {
		return "", err
	}
	return b.String(), nil
}

func startNginx(ctx context.Context, c nginxConfig) (*service, error) {
	conf, err := renderNginx(c)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(c.Dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	bin, err := lookNginx()
	if err != nil {
		return nil, err
	}
	s, err := startService("nginx", filepath.Join(c.Dir, "stderr.log"), bin, "-p", c.Dir, "-c", path,
		"-e", filepath.Join(c.Dir, "error.log"))
	if err != nil {
		return nil, err
	}
	if err := s.waitUp(ctx, 10*time.Second, dialCheck(c.Listen)); err != nil {
		s.stop(syscall.SIGTERM, 2*time.Second)
		log, _ := os.ReadFile(filepath.Join(c.Dir, "error.log"))
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return s, nil
}

// lookNginx finds nginx, which Debian installs in /usr/sbin (often not on
// a non-root PATH).
func lookNginx() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", errors.New("nginx not found (scripts/install-deps.sh bench installs it)")
}

// startGateway runs the built gateway against Redis with its data in dir.
func startGateway(ctx context.Context, bin, redisAddr, dataDir, logPath string) (*service, string, error) {
	return startGatewayEnv(ctx, bin, redisAddr, dataDir, logPath, nil)
}

// startGatewayEnv is startGateway with env added to the gateway's
// environment (OTEL_* for tracing) and args after the defaults (a later
// flag wins).
func startGatewayEnv(ctx context.Context, bin, redisAddr, dataDir, logPath string, env []string, args ...string) (*service, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	argv := append([]string{bin, "--listen", addr, "--redis-url", "redis://" + redisAddr + "/0",
		"--data-dir", dataDir, "--max-sandboxes", "0", "--log-level", "warn"}, args...)
	s, err := startServiceEnv("gateway", logPath, env, argv...)
	if err != nil {
		return nil, "", err
	}
	if err := s.waitUp(ctx, 30*time.Second, httpCheck("http://"+addr+"/healthz")); err != nil {
		s.stop(syscall.SIGTERM, 5*time.Second)
		log, _ := os.ReadFile(logPath)
		return nil, "", fmt.Errorf("%w\n%s", err, log)
	}
	return s, addr, nil
}

// toolVersion is the first line a tool prints about its version (some
// print it on stderr, some exit non-zero).
func toolVersion(ctx context.Context, argv ...string) string {
	out, _ := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if line == "" {
		return argv[0] + ": unknown version"
	}
	return strings.TrimSpace(line)
}

// proxyBase is the suite's thread through the proxy at addr.
func proxyBase(addr string) string { return "http://" + addr + "/threads/" + proxyThread }

// serviceTarget is the proxy s, one process, at addr.
func serviceTarget(name, addr string, s *service) target {
	return target{name: name, base: proxyBase(addr), cpu: func() (time.Duration, error) { return processCPU(s.pid()) },
		pids: func() ([]int, error) { return []int{s.pid()}, nil }}
}
