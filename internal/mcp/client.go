package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// maxResponse bounds a sandbox answer held in memory: a whole-file read is
// at most 16 MiB of content (the sandbox's own limit), base64 and JSON
// escaping included.
const maxResponse = 32 << 20

// Per-call timeouts: every sandbox call has one. A bash command waits for
// output up to bashNoChange (DeerFlow's no_change_timeout); the margin
// covers provisioning on first use.
const (
	fileTimeout  = 2 * time.Minute
	bashNoChange = 600 * time.Second
	bashTimeout  = bashNoChange + 2*time.Minute
)

// sandbox calls one thread's sandbox /v1 API through the gateway's own
// handler in-process, as the MCP caller: the request carries the caller's
// credential and Host, so authentication, provisioning on first use, idle
// touch, quotas, metrics and every backend work as for /threads/{t}/v1.
type sandbox struct {
	gateway http.Handler
	thread  string
	prefix  string // "/threads/{thread}"
	host    string
	auth    string // the caller's Authorization header; "" = none
	remote  string // the caller's address
}

// apiError is a failed sandbox call: the sandbox's or the gateway's answer.
type apiError struct {
	status  int
	code    string // the gateway's error code; "" for the sandbox's own errors
	message string
}

func (e *apiError) Error() string {
	if e.code != "" {
		return fmt.Sprintf("sandbox unavailable (%s): %s", e.code, e.message)
	}
	return e.message
}

// call POSTs req as JSON to /v1/{endpoint} and decodes the envelope's data
// into out.
func (s *sandbox) call(ctx context.Context, timeout time.Duration, endpoint string, req, out any) error {
	w, err := s.serve(ctx, timeout, http.MethodPost, s.prefix+"/v1/"+endpoint, req)
	if err != nil {
		return err
	}
	return decodeEnvelope(w.code(), w.body.Bytes(), out)
}

// control sends req (nil: no body) as JSON to the thread's control-plane
// route /threads/{thread}{route} and decodes its JSON answer into out (nil,
// or a 204: nothing to decode). Same caller, same handler as call: the
// gateway authorizes it as it would the caller's own request.
func (s *sandbox) control(ctx context.Context, timeout time.Duration, method, route string, req, out any) error {
	return s.gatewayCall(ctx, timeout, method, s.prefix+route, req, out)
}

// gatewayCall is control for any gateway path (/api/templates).
func (s *sandbox) gatewayCall(ctx context.Context, timeout time.Duration, method, path string, req, out any) error {
	w, err := s.serve(ctx, timeout, method, path, req)
	if err != nil {
		return err
	}
	status := w.code()
	if status >= 300 {
		var env struct {
			Error *api.ErrorDetail `json:"error"`
		}
		if json.Unmarshal(w.body.Bytes(), &env) != nil || env.Error == nil {
			return &apiError{status: status, code: "error", message: http.StatusText(status)}
		}
		return &apiError{status: status, code: env.Error.Code, message: env.Error.Message}
	}
	if out == nil || status == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(w.body.Bytes(), out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// serve runs one request of the caller, method path with req as JSON
// (nil: no body), through the gateway's handler.
func (s *sandbox) serve(ctx context.Context, timeout time.Duration, method, path string, req any) (*recorder, error) {
	var body io.Reader = http.NoBody
	if req != nil {
		data, err := json.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", path, err)
		}
		body = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, method, path, body)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", path, err)
	}
	r.Host = s.host
	r.RemoteAddr = s.remote
	if req != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	r.Header.Set("Accept", "application/json")
	if s.auth != "" {
		r.Header.Set("Authorization", s.auth)
	}
	w := &recorder{header: http.Header{}}
	s.gateway.ServeHTTP(w, r)
	if w.overflow {
		return nil, fmt.Errorf("%s: the sandbox answered with more than %d bytes", path, maxResponse)
	}
	if err := ctx.Err(); err != nil && w.status == 0 {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// decodeEnvelope reads the sandbox's {"success","message","data"} or the
// gateway's {"error":{"code","message"}}.
func decodeEnvelope(status int, body []byte, out any) error {
	var env struct {
		Success *bool            `json:"success"`
		Message string           `json:"message"`
		Data    json.RawMessage  `json:"data"`
		Error   *api.ErrorDetail `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return &apiError{status: status, message: fmt.Sprintf("the sandbox answered %d with a body that is not JSON", status)}
	}
	switch {
	case env.Error != nil:
		return &apiError{status: status, code: env.Error.Code, message: env.Error.Message}
	case status != http.StatusOK || env.Success == nil || !*env.Success:
		msg := strings.TrimSpace(env.Message)
		if msg == "" {
			msg = http.StatusText(status)
		}
		return &apiError{status: status, message: msg}
	}
	if out == nil || len(env.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("decode sandbox answer: %w", err)
	}
	return nil
}

// statusOf is the HTTP status of a failed call; 0 when it never got one.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) && ae.code == "" {
		return ae.status
	}
	return 0
}

// recorder is the in-process response: a bounded buffer. It deliberately
// has no Unwrap, so the router's ResponseController calls (read deadlines,
// hijacking) do not reach the MCP client's real connection.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.body.Len()+len(p) > maxResponse {
		w.overflow = true
		return 0, errors.New("response too large")
	}
	return w.body.Write(p)
}

// Flush is a no-op: the proxy flushes streamed answers.
func (w *recorder) Flush() {}

func (w *recorder) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
