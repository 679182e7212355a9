package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxOutput caps the output a command returns.
const DefaultMaxOutput = 1 << 20

// maxJSONBody bounds JSON request bodies (file writes carry content).
const maxJSONBody = 64 << 20

// Mapping maps a virtual path seen by the agent to a host directory.
type Mapping struct {
	Virtual  string
	Host     string
	ReadOnly bool
}

// Config of the sandbox server. The zero value serves on 127.0.0.1:8080 in
// container mode (no path mapping).
type Config struct {
	Listen    string // default 127.0.0.1:8080; containers pass 0.0.0.0:8080
	ListenFD  int    // >0: serve on this inherited listening socket instead
	Mappings  []Mapping
	Home      string       // virtual home/workspace dir reported and used as default cwd
	MaxOutput int64        // cap on returned command output; 0 = DefaultMaxOutput
	Env       []string     // inherited environment before secret stripping; nil = os.Environ()
	Logger    *slog.Logger // nil = discard
	// Secret, when set, is required in secretHeader on every
	// request (secret.go); "" = open, as in unit tests.
	Secret string

	wsPing time.Duration // WebSocket keepalive interval; 0 = wsPingEvery (tests shorten it)
}

// Server is the sandbox HTTP API.
type Server struct {
	pm        *PathMap
	version   string
	home      string // virtual
	homeHost  string
	maxOutput int64
	baseEnv   []string
	stateDir  string
	log       *slog.Logger
	sessions  sessionStore
	groups    groups
	closing   atomic.Bool
	stop      context.Context // ends at shutdown, closing WebSocket terminals
	stopNow   context.CancelFunc
	wsPing    time.Duration
	mux       *http.ServeMux
	secret    []byte       // SHA-256 of Config.Secret; nil = open
	inflight  atomic.Int64 // requests being handled (activity.go)

	shellOnce sync.Once
	shellInfo shellInfo
	shellErr  error
}

// New builds a server from cfg. Close releases it.
func New(cfg Config) (*Server, error) {
	pm, err := NewPathMap(cfg.Mappings)
	if err != nil {
		return nil, err
	}
	s := &Server{pm: pm, maxOutput: cfg.MaxOutput, log: cfg.Logger, version: version(), wsPing: cfg.wsPing,
		secret: secretDigest(cfg.Secret)}
	if s.maxOutput <= 0 {
		s.maxOutput = DefaultMaxOutput
	}
	if s.wsPing <= 0 {
		s.wsPing = wsPingEvery
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	s.baseEnv = inheritedEnv(env)
	if s.home, err = homeDir(cfg.Home, pm, env); err != nil {
		return nil, err
	}
	s.homeHost, _, _ = pm.ToHost(s.home)
	if s.stateDir, err = os.MkdirTemp("", "sandgate-sandbox-"); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	s.sessions.m = map[string]*session{}
	s.sessions.defaultID = newID()
	s.groups.m = map[int]*command{}
	s.stop, s.stopNow = context.WithCancel(context.Background())
	s.routes()
	go s.warmUp()
	return s, nil
}

// inheritedEnv strips secret-looking variables except those the launcher
// listed in SANDGATE_KEEP_ENV, and drops that list itself. The OTEL_*
// variables the gateway passes down configure this server's tracing, not
// the commands it runs (their headers may carry collector credentials):
// they are dropped too unless listed.
func inheritedEnv(env []string) []string {
	keep := map[string]bool{}
	for _, kv := range env {
		if name, val, _ := strings.Cut(kv, "="); name == KeepEnvVar {
			for _, k := range strings.Split(val, ",") {
				if k = strings.TrimSpace(k); k != "" {
					keep[k] = true
				}
			}
		}
	}
	out := StripSecrets(env, keep)
	kept := out[:0]
	for _, kv := range out {
		name, _, _ := strings.Cut(kv, "=")
		if name == KeepEnvVar || strings.HasPrefix(name, "OTEL_") && !keep[name] {
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}

func homeDir(home string, pm *PathMap, env []string) (string, error) {
	if home != "" {
		if !path.IsAbs(home) {
			return "", fmt.Errorf("--home %q: must be an absolute path", home)
		}
		if _, _, err := pm.ToHost(home); err != nil {
			return "", fmt.Errorf("--home %q: must be inside a mapping", home)
		}
		return path.Clean(home), nil
	}
	if pm.Enabled() {
		if _, _, err := pm.ToHost(virtualWorkspace); err == nil {
			return virtualWorkspace, nil
		}
		return pm.mounts[len(pm.mounts)-1].virtual, nil
	}
	for _, kv := range env {
		if h, ok := strings.CutPrefix(kv, "HOME="); ok && path.IsAbs(h) {
			return path.Clean(h), nil
		}
	}
	return "/", nil
}

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler { return s.recoverer(s.requireSecret(s.sameSite(s.mux))) }

// Shutdown refuses new commands, closes WebSocket terminals and kills every
// command's process group.
func (s *Server) Shutdown() {
	s.closing.Store(true)
	s.stopNow()
	s.groups.kill(func(*command) bool { return true })
}

// Close shuts down and removes the server's private state directory.
func (s *Server) Close() {
	s.Shutdown()
	_ = os.RemoveAll(s.stateDir)
}

// ensureStateDir returns the private state dir, recreating it if a temp
// cleaner removed it while the server ran.
func (s *Server) ensureStateDir() string {
	_ = os.MkdirAll(s.stateDir, 0o700)
	return s.stateDir
}

func (s *Server) shell() (shellInfo, error) {
	s.shellOnce.Do(func() { s.shellInfo, s.shellErr = detectShell() })
	return s.shellInfo, s.shellErr
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.Handle("GET /v1/sandbox", s.api(s.handleSandbox))
	m.Handle("GET /v1/sandgate/activity", s.api(s.handleActivity))
	m.Handle("GET /v1/sandbox/packages/python", s.api(s.handlePackages("python3", "python3 -m pip list --format=json 2>/dev/null")))
	m.Handle("GET /v1/sandbox/packages/nodejs", s.api(s.handlePackages("npm", "npm ls -g --depth=0 --json 2>/dev/null")))
	m.Handle("POST /v1/code/execute", s.api(bodyType(jsonBody, s.handleCodeExecute)))
	m.Handle("GET /v1/code/info", s.api(s.handleCodeInfo))
	m.Handle("POST /v1/shell/exec", s.api(bodyType(jsonBody, s.handleShellExec)))
	m.Handle("POST /v1/shell/view", s.api(bodyType(jsonBody, s.handleShellView)))
	m.Handle("POST /v1/shell/kill", s.api(bodyType(jsonBody, s.handleShellKill)))
	m.Handle("POST /v1/shell/sessions/create", s.api(bodyType(jsonBody, s.handleSessionCreate)))
	m.Handle("DELETE /v1/shell/sessions/{id}", s.api(s.handleSessionDelete))
	m.Handle("GET /v1/shell/ws", s.api(s.handleShellWS))
	m.Handle("POST /v1/shell/write", s.api(bodyType(jsonBody, s.handleShellWrite)))
	m.Handle("POST /v1/shell/wait", s.api(bodyType(jsonBody, s.handleShellWait)))
	m.Handle("GET /v1/shell/sessions", s.api(s.handleShellSessions))
	m.Handle("DELETE /v1/shell/sessions", s.api(s.handleShellSessionsCleanup))
	m.Handle("GET /v1/shell/sessions/stats", s.api(s.handleShellSessionStats))
	m.Handle("POST /v1/bash/exec", s.api(bodyType(jsonBody, s.handleBashExec)))
	m.Handle("POST /v1/bash/output", s.api(bodyType(jsonBody, s.handleBashOutput)))
	m.Handle("POST /v1/bash/write", s.api(bodyType(jsonBody, s.handleBashWrite)))
	m.Handle("POST /v1/bash/kill", s.api(bodyType(jsonBody, s.handleBashKill)))
	m.Handle("GET /v1/bash/sessions", s.api(s.handleBashSessions))
	m.Handle("POST /v1/bash/sessions/create", s.api(bodyType(jsonBody, s.handleBashSessionCreate)))
	m.Handle("POST /v1/bash/sessions/{session_id}/close", s.api(s.handleBashSessionClose))
	m.Handle("POST /v1/file/read", s.api(bodyType(jsonBody, s.handleFileRead)))
	m.Handle("POST /v1/file/write", s.api(bodyType(jsonBody, s.handleFileWrite)))
	m.Handle("POST /v1/file/replace", s.api(bodyType(jsonBody, s.handleFileReplace)))
	m.Handle("POST /v1/file/find", s.api(bodyType(jsonBody, s.handleFileFind)))
	m.Handle("POST /v1/file/glob", s.api(bodyType(jsonBody, s.handleFileGlob)))
	m.Handle("POST /v1/file/list", s.api(bodyType(jsonBody, s.handleFileList)))
	m.Handle("POST /v1/file/grep", s.api(bodyType(jsonBody, s.handleFileGrep)))
	m.Handle("POST /v1/file/search", s.api(bodyType(jsonBody, s.handleFileSearch)))
	m.Handle("POST /v1/file/str_replace_editor", s.api(bodyType(jsonBody, s.handleStrReplaceEditor)))
	m.Handle("POST /v1/file/upload", s.api(bodyType(multipartBody, s.handleFileUpload)))
	m.Handle("GET /v1/file/download", s.api(s.handleFileDownload))
	m.Handle("/", s.api(func(w http.ResponseWriter, r *http.Request) error {
		return &apiError{status: http.StatusNotFound, msg: "no such endpoint: " + r.Method + " " + r.URL.Path}
	}))
	s.mux = m
}

// envelope is the response shape of every JSON endpoint.
type envelope struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	// Code names a failure a client acts on by machine ("conflict").
	Code string `json:"code,omitempty"`
	Data any    `json:"data"`
	// Detail lists validation errors of a 422, FastAPI style, which is what
	// the generated AIO SDKs decode a 422 into.
	Detail []fieldError `json:"detail,omitempty"`
}

type fieldError struct {
	Loc  []string `json:"loc"`
	Msg  string   `json:"msg"`
	Type string   `json:"type"`
}

// apiError is a failure with its HTTP status and a client-safe message.
type apiError struct {
	status int
	msg    string
	field  string // set for 422: the offending request field
	code   string // optional machine-readable failure code
	err    error  // internal cause; logged, never sent
}

func (e *apiError) Error() string { return e.msg }

// invalid is a 422 for field; the message always names the field.
func invalid(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if !strings.Contains(msg, field) {
		msg = field + ": " + msg
	}
	return &apiError{status: http.StatusUnprocessableEntity, field: field, msg: msg}
}

func missing(field string) error { return invalid(field, "field required: %s", field) }

func statusErr(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

func ok(w http.ResponseWriter, msg string, data any) {
	writeJSON(w, http.StatusOK, envelope{Success: true, Message: msg, Data: data})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, err: err}
	}
	if ae.status >= 500 {
		s.log.ErrorContext(r.Context(), "sandbox request failed", "method", r.Method, "path", r.URL.Path, "error", ae.err)
		if ae.msg == "" {
			ae.msg = "internal error"
		}
	}
	env := envelope{Success: false, Message: ae.msg, Code: ae.code}
	if ae.field != "" {
		env.Detail = []fieldError{{Loc: []string{"body", ae.field}, Msg: ae.msg, Type: "value_error"}}
	}
	writeJSON(w, ae.status, env)
}

func (s *Server) api(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// recoverer turns a handler panic into a 500 instead of a dropped connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.writeError(w, r, &apiError{status: http.StatusInternalServerError, err: fmt.Errorf("panic: %v\n%s", v, debug.Stack())})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// decode reads a JSON object body into dst: 413 over the size limit, 400
// when it is not valid JSON, 422 naming the field whose type is wrong.
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	err := dec.Decode(dst)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("trailing data after the JSON object")
	}
	var maxErr *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &maxErr):
		return statusErr(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", maxErr.Limit)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return invalid(typeErr.Field, "field %s: expected %s, got JSON %s", typeErr.Field,
			strings.TrimPrefix(typeErr.Type.String(), "*"), typeErr.Value)
	}
	return statusErr(http.StatusBadRequest, "malformed JSON body: %v", err)
}
