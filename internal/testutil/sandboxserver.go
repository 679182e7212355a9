package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// SandboxServer is a sandbox server (SandboxBinary) run as a process of
// its own, as a backend runs it: its commands are its descendants, not
// the test's, and it requires Secret.
type SandboxServer struct {
	URL    string // http://127.0.0.1:port
	Secret string
	PID    int    // the process started: the server's, or its wrapper's
	Home   string // host dir of its workspace, /mnt/user-data/workspace
}

// StartSandboxServer starts a sandbox server on a loopback port handed
// over as fd 3, with a secret delivered by file, its workspace mapped to
// a temporary directory, and waits until it answers. wrapper, when given,
// is a command line the server's is appended to (unshare, say). Cleanup
// stops it (SIGTERM, which kills its commands; SIGKILL after 5 s).
func StartSandboxServer(t testing.TB, wrapper ...string) *SandboxServer {
	t.Helper()
	bin := SandboxBinary(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "workspace")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	secret := hex.EncodeToString(b)
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	lf, url := ListenerFile(t)

	args := append(wrapper, bin, sandboxspec.ServerCommand, "--"+sandboxspec.FlagListenFD, "3",
		"--"+sandboxspec.FlagSecretFile, secretFile, "--"+sandboxspec.FlagMap, "/mnt/user-data/workspace="+home)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.ExtraFiles = []*os.File{lf}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = lf.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sandbox", nil)
		req.Header.Set(sandboxspec.SecretHeader, secret)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("sandbox server exited: %s", stderr.String())
		case <-ctx.Done():
			stop() // its stderr is complete once it exited
			t.Fatalf("sandbox server not ready: %s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return &SandboxServer{URL: url, Secret: secret, PID: cmd.Process.Pid, Home: home}
}

// ListenerFile is a listening loopback TCP socket as a file to hand a
// server (--listen-fd), and its http:// URL. The caller closes the file
// once the server has it.
func ListenerFile(t testing.TB) (*os.File, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close() // the dup in lf keeps the socket listening
	return lf, "http://" + ln.Addr().String()
}
