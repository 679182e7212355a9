package sandbox

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/user"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// GET /v1/sandbox: the sandbox's context, also the readiness probe.

// version is the build's module version, "dev" for local builds.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

type sandboxInfo struct {
	HomeDir   string        `json:"home_dir"`
	Workspace string        `json:"workspace"`
	Version   string        `json:"version"`
	Detail    sandboxDetail `json:"detail"`
}

// sandboxDetail carries the AIO SandboxDetail fields (system, runtime,
// utils), which the generated SDKs require, plus Sandgate's own.
type sandboxDetail struct {
	System    systemEnv        `json:"system"`
	Runtime   map[string][]any `json:"runtime"`
	Utils     []any            `json:"utils"`
	Server    string           `json:"server"`
	Mode      string           `json:"mode"` // host | container
	Shell     string           `json:"shell,omitempty"`
	MaxOutput int64            `json:"max_output"`
	Mounts    []mountShown     `json:"mounts,omitempty"`
}

type systemEnv struct {
	OS            string   `json:"os"`
	OSVersion     string   `json:"os_version"`
	Arch          string   `json:"arch"`
	User          string   `json:"user"`
	HomeDir       string   `json:"home_dir"`
	Timezone      string   `json:"timezone"`
	OccupiedPorts []string `json:"occupied_ports"`
}

type mountShown struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only"`
}

// handleOpenAPI serves this API's description (sandboxspec.OpenAPI): the
// sandbox describes itself, at the same path through every gateway prefix.
func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(sandboxspec.OpenAPIJSON())
	return nil
}

// handleSandbox answers AIO's SandboxResponse: the context at the top level
// and "data" null (its schema allows only a string or null there).
func (s *Server) handleSandbox(w http.ResponseWriter, r *http.Request) error {
	d := sandboxDetail{
		System: systemEnv{OS: runtime.GOOS, OSVersion: kernelRelease(), Arch: runtime.GOARCH, User: userName(),
			HomeDir: s.home, Timezone: zoneName(), OccupiedPorts: []string{}},
		Runtime: map[string][]any{"python": {}, "nodejs": {}}, Utils: []any{},
		Server: "sandgate", Mode: "container", MaxOutput: s.maxOutput,
	}
	if sh, err := s.shell(); err == nil {
		d.Shell = sh.name
	}
	if s.pm.Enabled() {
		d.Mode = "host"
		for _, m := range s.pm.mounts {
			d.Mounts = append(d.Mounts, mountShown{Path: m.virtual, ReadOnly: m.readOnly})
		}
	}
	info := sandboxInfo{HomeDir: s.home, Workspace: s.home, Version: s.version, Detail: d}
	writeJSON(w, http.StatusOK, sandboxResponse{true, "ok", nil, info})
	return nil
}

type sandboxResponse struct {
	Success bool    `json:"success"`
	Message string  `json:"message"`
	Data    *string `json:"data"`
	sandboxInfo
}

// warmUp does, while the server starts, the first-time work of answering
// GET /v1/sandbox, the readiness probe every cold create waits for: the
// shell lookup, the user and time zone files, the JSON encoder of the
// answer.
func (s *Server) warmUp() {
	_, _ = s.shell()
	_, _ = userName(), zoneName()
	_ = json.NewEncoder(io.Discard).Encode(sandboxResponse{})
}

func userName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

func zoneName() string {
	name, _ := time.Now().Zone()
	return name
}
