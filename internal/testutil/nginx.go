package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/osthread"
)

// Nginx returns the nginx binary (Debian installs it in /usr/sbin, often
// outside a non-root PATH), or fails or skips as Require does.
func Nginx(t testing.TB) string {
	t.Helper()
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/nginx"); statErr == nil {
			nginx, err = "/usr/sbin/nginx", nil
		}
	}
	Require(t, err == nil, "nginx (Debian package nginx)")
	return nginx
}

// StartNginx runs the real nginx with prefix dir and httpBlock as the
// contents of its http block. The rest of the configuration every test
// needs is written here: pid, error log and temp paths inside dir, and, as
// root, workers that may reach them. The configuration is checked with
// nginx -t first; nginx is killed at cleanup, and its output and error.log
// are logged when the test failed.
func StartNginx(t testing.TB, dir, httpBlock string) {
	t.Helper()
	nginx := Nginx(t)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	conf := fmt.Sprintf(`%s
worker_processes 1;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log;
events { worker_connections 128; }
http {
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
%[3]s
}
`, user, dir, httpBlock)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(nginx, "-t", "-p", dir, "-c", path).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// osthread: the parent-death signal is tied to the forking thread
	if err := osthread.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx output:\n%s\nerror.log:\n%s", out.String(), log)
		}
	})
}
