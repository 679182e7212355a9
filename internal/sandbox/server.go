package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"os"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
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
	// Secret, when set, is required in sandboxspec.SecretHeader on every
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
	ports     *httputil.ReverseProxy       // the port bridge (ports.go)
	secret    []byte                       // SHA-256 of Config.Secret; nil = open
	inflight  atomic.Int64                 // requests being handled (activity.go)
	frozen    freezer                      // admin.go
	cgroup    atomic.Pointer[cgroupSource] // the stats' cgroup, once found (cgroup_linux.go)
	cmdlog    cmdLog                       // the commands that ended (cmdlog.go)

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
	s.ports = s.newPortProxy()
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
		if name, val, _ := strings.Cut(kv, "="); name == sandboxspec.KeepEnvVar {
			for _, k := range strings.Split(val, ",") {
				if k = strings.TrimSpace(k); k != "" {
					keep[k] = true
				}
			}
		}
	}
	out := sandboxspec.StripSecrets(env, keep)
	kept := out[:0]
	for _, kv := range out {
		name, _, _ := strings.Cut(kv, "=")
		if name == sandboxspec.KeepEnvVar || strings.HasPrefix(name, "OTEL_") && !keep[name] {
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
		if _, _, err := pm.ToHost(sandboxspec.VirtualWorkspace); err == nil {
			return sandboxspec.VirtualWorkspace, nil
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

// Handler is the HTTP API, and the port bridge (ports.go) behind the same
// secret and cross-site checks. The bridge is matched before the mux,
// which would redirect a path it cleans ("//", a trailing "/.") to a
// location only this server knows, instead of forwarding it as sent.
func (s *Server) Handler() http.Handler {
	ports := s.api(s.handlePort)
	return s.recoverer(s.requireSecret(s.sameSite(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, sandboxspec.PortPrefix) {
			ports.ServeHTTP(w, r)
			return
		}
		s.mux.ServeHTTP(w, r)
	}))))
}

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

// route is one endpoint: a ServeMux pattern and its handler.
type route struct {
	pattern string
	handler func(http.ResponseWriter, *http.Request) error
}

// routeTable is every endpoint the server serves, and the only place one is
// registered: Handler wraps all of them in the secret and cross-site checks,
// and the tests walk this table (Routes), so an endpoint added here is
// checked without anyone editing a test list. The port bridge, any method
// under sandboxspec.PortPrefix, is Handler's (ports.go).
func (s *Server) routeTable() []route {
	return []route{
		{"GET " + sandboxspec.OpenAPIPath, s.handleOpenAPI},
		{"GET /v1/sandbox", s.handleSandbox},
		{"GET " + sandboxspec.ActivityPath, s.handleActivity},
		{"POST " + sandboxspec.FreezePath, bodyless(s.handleFreeze)},
		{"POST " + sandboxspec.ThawPath, bodyless(s.handleThaw)},
		{"GET " + sandboxspec.StatsPath, s.handleStats},
		{"GET " + sandboxspec.CommandsPath, s.handleCommands},
		{"GET /v1/sandbox/packages/python", s.handlePackages("python3", "python3 -m pip list --format=json 2>/dev/null")},
		{"GET /v1/sandbox/packages/nodejs", s.handlePackages("npm", "npm ls -g --depth=0 --json 2>/dev/null")},
		{"POST /v1/code/execute", bodyType(jsonBody, s.handleCodeExecute)},
		{"GET /v1/code/info", s.handleCodeInfo},
		{"POST /v1/shell/exec", bodyType(jsonBody, s.handleShellExec)},
		{"POST /v1/shell/view", bodyType(jsonBody, s.handleShellView)},
		{"POST /v1/shell/kill", bodyType(jsonBody, s.handleShellKill)},
		{"POST /v1/shell/sessions/create", bodyType(jsonBody, s.handleSessionCreate)},
		{"DELETE /v1/shell/sessions/{session_id}", s.handleSessionDelete},
		{"GET /v1/shell/ws", s.handleShellWS},
		{"POST /v1/shell/write", bodyType(jsonBody, s.handleShellWrite)},
		{"POST /v1/shell/wait", bodyType(jsonBody, s.handleShellWait)},
		{"GET /v1/shell/sessions", s.handleShellSessions},
		{"DELETE /v1/shell/sessions", s.handleShellSessionsCleanup},
		{"GET /v1/shell/sessions/stats", s.handleShellSessionStats},
		{"POST /v1/bash/exec", bodyType(jsonBody, s.handleBashExec)},
		{"POST /v1/bash/output", bodyType(jsonBody, s.handleBashOutput)},
		{"POST /v1/bash/write", bodyType(jsonBody, s.handleBashWrite)},
		{"POST /v1/bash/kill", bodyType(jsonBody, s.handleBashKill)},
		{"GET /v1/bash/sessions", s.handleBashSessions},
		{"POST /v1/bash/sessions/create", bodyType(jsonBody, s.handleBashSessionCreate)},
		{"POST /v1/bash/sessions/{session_id}/close", bodyless(s.closeBashSession)},
		{"POST /v1/file/read", bodyType(jsonBody, s.handleFileRead)},
		{"POST /v1/file/write", bodyType(jsonBody, s.handleFileWrite)},
		{"POST /v1/file/replace", bodyType(jsonBody, s.handleFileReplace)},
		{"POST /v1/file/find", bodyType(jsonBody, s.handleFileFind)},
		{"POST /v1/file/glob", bodyType(jsonBody, s.handleFileGlob)},
		{"POST /v1/file/list", bodyType(jsonBody, s.handleFileList)},
		{"POST /v1/file/grep", bodyType(jsonBody, s.handleFileGrep)},
		{"POST /v1/file/search", bodyType(jsonBody, s.handleFileSearch)},
		{"POST /v1/file/str_replace_editor", bodyType(jsonBody, s.handleStrReplaceEditor)},
		{"POST /v1/file/upload", bodyType(multipartBody, s.handleFileUpload)},
		{"GET /v1/file/download", s.handleFileDownload},
	}
}

// Routes lists the patterns of every registered endpoint ("METHOD /path"),
// in registration order; everything else is the 404 fallback.
func (s *Server) Routes() []string {
	table := s.routeTable()
	out := make([]string, len(table))
	for i, rt := range table {
		out[i] = rt.pattern
	}
	return out
}

func (s *Server) routes() {
	m := http.NewServeMux()
	for _, rt := range s.routeTable() {
		m.Handle(rt.pattern, s.api(rt.handler))
	}
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

// api serves h, counted in the requests in flight (activity.go) unless it
// answers the activity probe itself: the gateway's probes (the freezer's,
// the reaper's, the health check's, from several replicas at once) are no
// tenant's work and must not make each other look busy.
func (s *Server) api(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != sandboxspec.ActivityPath {
			s.inflight.Add(1)
			defer s.inflight.Add(-1)
		}
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
		return refuseUnsupported(dst)
	case errors.As(err, &maxErr):
		return statusErr(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", maxErr.Limit)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return invalid(typeErr.Field, "field %s: expected %s, got JSON %s", typeErr.Field,
			strings.TrimPrefix(typeErr.Type.String(), "*"), typeErr.Value)
	}
	return statusErr(http.StatusBadRequest, "malformed JSON body: %v", err)
}
