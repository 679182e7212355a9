package sandbox

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// POST /v1/code/execute and GET /v1/code/info: python and javascript run
// as one-shot `python3 -c` / `node -e` processes in a fresh shell session
// (so cwd/exports of other calls do not leak in or out), when the runtime
// exists in the sandbox. The code travels in an environment variable, so
// tracebacks name <string>/[eval], never a host file. Stateful execution
// (Jupyter kernels, the Node REPL) stays with the AIO image.
//
// GET /v1/sandbox/packages/{python,nodejs}: `pip list` / `npm ls -g` as
// JSON; an empty list when the runtime is missing.

const (
	codeDefaultTimeout = 30 * time.Second
	codeMaxTimeout     = 300 * time.Second
	codeEnvVar         = "SANDGATE_CODE"
)

type runtimeSpec struct {
	bin, command, description, versionCmd string
}

var runtimes = map[string]runtimeSpec{
	"python":     {"python3", `python3 -c "$` + codeEnvVar + `"`, "Python 3 (one-shot process)", "python3 --version"},
	"javascript": {"node", `node -e "$` + codeEnvVar + `"`, "Node.js (one-shot process)", "node --version"},
}

// runOnce runs command in a new session, as an id-less bash/exec does, and
// waits for it (at most hard), leaving no session behind.
func (s *Server) runOnce(r *http.Request, command string, env map[string]*string, hard time.Duration) (*command, string, error) {
	sess, c, err := s.startExec(execReq{command: command, env: env, hard: hard, separate: true, bashAPI: true, who: callerOf(r)}, "session_id")
	if err != nil {
		return nil, "", err
	}
	st := await(r.Context(), c, awaitOpts{}, nil)
	if st != statusRunning {
		s.sessions.remove(sess.id)
	}
	return c, st, nil
}

type codeExecReq struct {
	Language *string     `json:"language"`
	Code     *string     `json:"code"`
	Timeout  *float64    `json:"timeout"`
	Cwd      string      `json:"cwd"`
	Stateful unsupported `json:"stateful" accept:"false" why:"stateful execution needs the AIO image's Jupyter or Node REPL"`
	// only meaningful for stateful execution
	SessionID unsupported `json:"session_id"`
}

type codeExecResult struct {
	Language string           `json:"language"`
	Status   string           `json:"status"` // ok | error | timeout
	Outputs  []map[string]any `json:"outputs"`
	Code     string           `json:"code"`
	Stdout   string           `json:"stdout"`
	Stderr   string           `json:"stderr"`
	ExitCode *int             `json:"exit_code"`
}

func (s *Server) handleCodeExecute(w http.ResponseWriter, r *http.Request) error {
	var req codeExecReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	lang, err := required("language", req.Language)
	if err != nil {
		return err
	}
	rt, known := runtimes[lang]
	if !known {
		return invalid("language", "language must be python or javascript")
	}
	if req.Code == nil {
		return missing("code")
	}
	if _, err := exec.LookPath(rt.bin); err != nil {
		return invalid("language", "%s is not installed in this sandbox", rt.bin)
	}
	timeout := codeDefaultTimeout
	if req.Timeout != nil {
		if timeout, err = seconds("timeout", req.Timeout); err != nil {
			return err
		}
		timeout = min(max(timeout, time.Second), codeMaxTimeout)
	}
	command := rt.command
	if req.Cwd != "" {
		if _, _, err := s.hostPath("cwd", req.Cwd, false); err != nil {
			return err
		}
		command = "cd " + shellQuote(req.Cwd) + " && " + command
	}
	code := *req.Code
	c, st, err := s.runOnce(r, command, map[string]*string{codeEnvVar: &code}, timeout)
	if err != nil {
		return err
	}
	res := codeExecResult{Language: lang, Code: code, Stdout: c.streams[0].String(), Stderr: c.streams[1].String(),
		ExitCode: exitCodeFor(c, st), Outputs: []map[string]any{}}
	switch {
	case st == statusHardTimeout:
		res.Status = "timeout"
	case st == statusCompleted && res.ExitCode != nil && *res.ExitCode == 0:
		res.Status = "ok"
	default:
		res.Status = "error"
	}
	for _, stream := range []struct{ name, text string }{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
		if stream.text != "" {
			res.Outputs = append(res.Outputs, map[string]any{"output_type": "stream", "name": stream.name, "text": stream.text})
		}
	}
	ok(w, "code executed: "+res.Status, res)
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type codeLanguage struct {
	Language       string         `json:"language"`
	Description    string         `json:"description"`
	RuntimeVersion *string        `json:"runtime_version"`
	DefaultTimeout int            `json:"default_timeout"`
	MaxTimeout     int            `json:"max_timeout"`
	Details        map[string]any `json:"details"`
}

func (s *Server) handleCodeInfo(w http.ResponseWriter, r *http.Request) error {
	langs := []codeLanguage{}
	for _, lang := range []string{"python", "javascript"} {
		rt := runtimes[lang]
		if _, err := exec.LookPath(rt.bin); err != nil {
			continue
		}
		l := codeLanguage{Language: lang, Description: rt.description, DefaultTimeout: int(codeDefaultTimeout.Seconds()),
			MaxTimeout: int(codeMaxTimeout.Seconds()), Details: map[string]any{"stateful": false}}
		if c, st, err := s.runOnce(r, rt.versionCmd+" 2>&1", nil, 10*time.Second); err == nil && st == statusCompleted {
			v := strings.TrimSpace(c.streams[0].String())
			l.RuntimeVersion = &v
		}
		langs = append(langs, l)
	}
	ok(w, "code runtimes", map[string]any{"languages": langs})
	return nil
}

// handlePackages lists the installed packages of a runtime as JSON.
func (s *Server) handlePackages(bin, command string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := exec.LookPath(bin); err != nil {
			ok(w, bin+" is not installed in this sandbox", []any{})
			return nil
		}
		c, st, err := s.runOnce(r, command, nil, 60*time.Second)
		if err != nil {
			return err
		}
		var data any
		if st != statusCompleted || json.Unmarshal([]byte(c.streams[0].String()), &data) != nil {
			return &apiError{status: http.StatusBadGateway, msg: "could not list the " + bin + " packages"}
		}
		ok(w, "packages listed", data)
		return nil
	}
}
