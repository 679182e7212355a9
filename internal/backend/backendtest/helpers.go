// Package backendtest is the contract every backend.Backend keeps, run as
// subtests by Run, and the helpers the backends' own tests share: specs
// with real thread mounts, creating with cleanup, and talking to a sandbox
// through its API. Only _test.go files import it.
package backendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// callTimeout bounds one backend call or sandbox request in a test: an
// image pull or a Pod start fits, a hung backend fails the test instead of
// the whole run.
const callTimeout = 60 * time.Second

// Ctx is the test's context, bounded by callTimeout.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Spec is a thread's spec with its real mounts (backend.ThreadMounts, the
// host directories created) as the pool would build it.
func Spec(t testing.TB, mc backend.MountConfig, user, thread string) backend.Spec {
	t.Helper()
	mounts, err := backend.ThreadMounts(mc, user, thread)
	if err != nil {
		t.Fatalf("ThreadMounts: %v", err)
	}
	return backend.Spec{SandboxID: identity.SandboxID(user, thread), User: user, Thread: thread, Mounts: mounts}
}

// MustCreate creates the sandbox and destroys that incarnation when the
// test ends.
func MustCreate(t testing.TB, b backend.Backend, spec backend.Spec) backend.Info {
	t.Helper()
	info, err := b.Create(Ctx(t), spec)
	if err != nil {
		t.Fatalf("Create %s: %v", spec.SandboxID, err)
	}
	destroyLater(t, b, info)
	return info
}

// destroyLater destroys that incarnation when the test ends.
func destroyLater(t testing.TB, b backend.Backend, info backend.Info) {
	t.Cleanup(func() {
		// The test's context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_ = b.Destroy(ctx, backend.Info{SandboxID: info.SandboxID, Thread: info.Thread, Incarnation: info.Incarnation})
	})
}

// Eventually polls cond until it holds, or fails the test after 15 s.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ContainsRun reports whether want occurs in args as consecutive elements
// (a flag and its value in a command line).
func ContainsRun(args, want []string) bool {
	for i := range args {
		if i+len(want) <= len(args) && slices.Equal(args[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// Status is the status of GET /v1/sandbox with key in sandboxspec.SecretHeader
// ("" = none), or 0 when the sandbox cannot be reached.
func Status(t testing.TB, url, key string) int {
	t.Helper()
	resp, err := request(t, url, key, http.MethodGet, "/v1/sandbox", nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ExecResult is what POST /v1/shell/exec reports of a finished command.
type ExecResult struct {
	Output   string
	ExitCode int
}

// Exec runs command in the sandbox's default shell session through its API
// and fails the test unless the command ran to an exit code.
func Exec(t testing.TB, info backend.Info, command string) ExecResult {
	t.Helper()
	var data struct {
		Output   string `json:"output"`
		ExitCode *int   `json:"exit_code"`
	}
	if err := Call(t, info, "/v1/shell/exec", map[string]any{"command": command}, &data); err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	if data.ExitCode == nil {
		t.Fatalf("exec %q: no exit code (output %q)", command, data.Output)
	}
	return ExecResult{Output: data.Output, ExitCode: *data.ExitCode}
}

// WriteFile writes content to file (a virtual path) through the sandbox's
// API; the error carries the answer of a refusal.
func WriteFile(t testing.TB, info backend.Info, file, content string) error {
	t.Helper()
	return Call(t, info, "/v1/file/write", map[string]any{"file": file, "content": content}, nil)
}

// ReadFile reads file (a virtual path) through the sandbox's API.
func ReadFile(t testing.TB, info backend.Info, file string) (string, error) {
	t.Helper()
	var data struct {
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
	}
	if err := Call(t, info, "/v1/file/read", map[string]any{"file": file}, &data); err != nil {
		return "", err
	}
	if data.Encoding != "utf-8" {
		return "", fmt.Errorf("read %s: encoding %q", file, data.Encoding)
	}
	return data.Content, nil
}

// Call POSTs req to the sandbox's API and decodes the envelope's data into
// out (nil = ignore it); anything but a 200 with success true is an error.
func Call(t testing.TB, info backend.Info, path string, req, out any) error {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	resp, err := request(t, info.URL, info.Secret, http.MethodPost, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read %s answer: %w", path, err)
	}
	var env struct {
		Success bool            `json:"success"`
		Data    json.RawMessage `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &env) != nil || !env.Success {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return fmt.Errorf("%s: decode data: %w (%s)", path, err, raw)
		}
	}
	return nil
}

// request sends one request to a sandbox URL, http:// or unix://.
func request(t testing.TB, url, key, method, path string, body []byte) (*http.Response, error) {
	client, base := backend.Client(url)
	req, err := http.NewRequestWithContext(Ctx(t), method, base+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(sandboxspec.SecretHeader, key)
	}
	req.Close = true // a Unix-socket client is one per request: keep no idle connection behind
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}
