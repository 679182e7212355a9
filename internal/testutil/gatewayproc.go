package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Gateway is a real gateway process on loopback (the process backend),
// with its own redis-server and data dir, for tests of clients that talk
// to it over HTTP (test/genclient, clients/python). test/e2e has its own
// fleet harness for several replicas.
type Gateway struct {
	URL      string
	Key      string // the API key of user "alice" (scope threads)
	AdminKey string // an admin's, which the cleanup uses
	Logs     *LogBuffer
}

// StartGateway starts one and stops it, and every sandbox it made, at
// cleanup. It authenticates with API keys: Key, and AdminKey.
func StartGateway(t testing.TB, extra ...string) *Gateway {
	t.Helper()
	redis := StartRedis(t)
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	g := &Gateway{Key: "alice-key-" + nonce, AdminKey: "ops-key-" + nonce, Logs: &LogBuffer{}}
	keys := "alice=" + sha(g.Key) + ",ops=" + sha(g.AdminKey) + ":admin"
	for attempt := 1; ; attempt++ {
		port := FreePort(t)
		g.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
		args := append([]string{"--listen", "127.0.0.1:" + strconv.Itoa(port), "--redis-url", redis.URL(),
			"--data-dir", t.TempDir(), "--log-format", "json", "--auth-api-keys", keys}, extra...)
		cmd := exec.Command(GatewayBinary(t), args...)
		cmd.Stdout, cmd.Stderr = g.Logs, g.Logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start gateway: %v", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if up(g, done) {
			t.Cleanup(func() {
				g.destroyAll(t) // a stopped gateway leaves its sandboxes running
				stop()
			})
			return g
		}
		stop()
		if attempt == 3 || !strings.Contains(g.Logs.String(), "address already in use") {
			t.Fatalf("gateway did not start:\n%s", g.Logs)
		}
		g.Logs = &LogBuffer{} // the port was taken meanwhile: another
	}
}

// up waits until the gateway answers /healthz and has logged that it
// listens (a port taken by another process would answer too).
func up(g *Gateway, done <-chan struct{}) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(g.URL + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK && strings.Contains(g.Logs.String(), `"gateway listening"`) {
				return true
			}
		}
		select {
		case <-done:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

func sha(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// destroyAll destroys every sandbox through the operator API.
func (g *Gateway) destroyAll(t testing.TB) {
	call := func(method, path string, out any) error {
		req, err := http.NewRequest(method, g.URL+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+g.AdminKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %s", method, path, res.Status)
		}
		if out != nil {
			return json.NewDecoder(res.Body).Decode(out)
		}
		return nil
	}
	var list struct {
		Sandboxes []struct {
			ID string `json:"sandbox_id"`
		} `json:"sandboxes"`
	}
	if err := call(http.MethodGet, "/admin/v1/sandboxes", &list); err != nil {
		t.Errorf("list sandboxes at cleanup: %v", err)
		return
	}
	for _, sb := range list.Sandboxes {
		if err := call(http.MethodDelete, "/admin/v1/sandboxes/"+sb.ID, nil); err != nil {
			t.Errorf("destroy sandbox at cleanup: %v", err)
		}
	}
}
