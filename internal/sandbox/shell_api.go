package sandbox

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// Shell API. Semantics worth knowing:
//   - shell/exec without `id` runs in the server's one default session, so
//     state carries over between id-less calls; its id comes back in
//     `session_id`.
//   - bash/exec follows AIO's BashExecRequest: without `session_id` it runs
//     in a new session made from the server's start state (home dir,
//     inherited env) whose id comes back and stays usable until closed or
//     evicted (a generated session, evicted first). In any session a
//     bash/exec command's own `cd`/`export` never reach later calls; only
//     `exec_dir` moves the session's default working directory.
//   - `timeout` (seconds) only stops waiting, as in the all-in-one sandbox:
//     the call returns status running with the output so far and the
//     command continues (shell/view follows it). `hard_timeout` kills the
//     command's process group (status hard_timeout; bash/exec, following
//     the AIO bash API, calls it timed_out).
//   - `no_change_timeout`: return with status no_change_timeout after that
//     many seconds without new output; the command keeps running and
//     shell/view or shell/kill can follow it.
//   - A client that disconnects does not kill its command; an SSE client
//     resumes its stream with Last-Event-ID (sse.go).
//   - `exit_code` is null while the command runs, an int once it ended
//     (128+signal when killed).

type shellExecReq struct {
	ID              string             `json:"id"`
	ExecDir         string             `json:"exec_dir"`
	Command         *string            `json:"command"`
	AsyncMode       bool               `json:"async_mode"`
	Timeout         *float64           `json:"timeout"`
	NoChangeTimeout *float64           `json:"no_change_timeout"`
	HardTimeout     *float64           `json:"hard_timeout"`
	Env             map[string]*string `json:"env"`
	// a missing exec_dir is always an error here (strict), and output is
	// always capped (at DefaultMaxOutput, not AIO's 30000 characters)
	Strict           unsupported `json:"strict" accept:"true"`
	PreserveSymlinks unsupported `json:"preserve_symlinks" accept:"false"`
	Truncate         unsupported `json:"truncate" accept:"true"`
}

type bashExecReq struct {
	SessionID       string             `json:"session_id"`
	Command         *string            `json:"command"`
	ExecDir         string             `json:"exec_dir"`
	Env             map[string]*string `json:"env"`
	AsyncMode       bool               `json:"async_mode"`
	Timeout         *float64           `json:"timeout"`
	HardTimeout     *float64           `json:"hard_timeout"`
	MaxOutputLength *int               `json:"max_output_length"`
}

type sessionReq struct {
	ID               string      `json:"id"`
	ExecDir          string      `json:"exec_dir"`
	NoChangeTimeout  *float64    `json:"no_change_timeout"`
	PreserveSymlinks unsupported `json:"preserve_symlinks" accept:"false"`
}

type shellResult struct {
	SessionID string `json:"session_id"`
	CommandID string `json:"command_id"`
	Command   string `json:"command"`
	Status    string `json:"status"`
	Output    string `json:"output"`
	ExitCode  *int   `json:"exit_code"`
}

// killResult adds the AIO kill result's returncode (-1 while unknown).
type killResult struct {
	shellResult
	Returncode int `json:"returncode"`
}

type bashResult struct {
	SessionID string `json:"session_id"`
	CommandID string `json:"command_id"`
	Command   string `json:"command"`
	Status    string `json:"status"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  *int   `json:"exit_code"`
	// Offset and StderrOffset are where bash/output continues from.
	Offset       int64 `json:"offset"`
	StderrOffset int64 `json:"stderr_offset"`
}

type sessionResult struct {
	SessionID  string `json:"session_id"`
	WorkingDir string `json:"working_dir"`
}

// seconds converts an optional seconds field; absent or 0 means none.
func seconds(field string, v *float64) (time.Duration, error) {
	if v == nil || *v == 0 {
		return 0, nil
	}
	if *v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return 0, invalid(field, "%s must be a non-negative number of seconds", field)
	}
	return time.Duration(min(*v, 1e9) * float64(time.Second)), nil
}

func required(field string, v *string) (string, error) {
	if v == nil {
		return "", missing(field)
	}
	if strings.TrimSpace(*v) == "" {
		return "", invalid(field, "%s must not be empty", field)
	}
	return *v, nil
}

// execReq is a command request common to shell/exec and bash/exec.
type execReq struct {
	sessionID, command, execDir string
	env                         map[string]*string
	hard                        time.Duration
	separate                    bool
	// bashAPI is AIO's bash/exec: no session id makes a new session, not the
	// default one; the command's cd/export never reach the session; exec_dir
	// becomes the session's default working directory.
	bashAPI bool
	stdin   bool   // async_mode: stdin is a pipe for shell/write, bash/write
	who     string // the caller its record names (callerOf)
}

// startExec finds the session (without an id, the default one) and starts
// the command in it.
func (s *Server) startExec(x execReq, idField string) (*session, *command, error) {
	if s.closing.Load() {
		return nil, nil, statusErr(http.StatusServiceUnavailable, "sandbox server is shutting down")
	}
	rs := runSpec{text: x.command, mapped: s.pm.MapCommand(x.command), separate: x.separate, stdin: x.stdin,
		hardTimeout: x.hard, stateless: x.bashAPI, who: x.who}
	if strings.ContainsRune(x.command, 0) {
		return nil, nil, invalid("command", "command must not contain NUL bytes")
	}
	if x.execDir != "" {
		dir, err := s.hostDir("exec_dir", x.execDir)
		if err != nil {
			return nil, nil, err
		}
		rs.dir = dir
	}
	if len(x.env) > 0 {
		rs.env = make(map[string]*string, len(x.env))
		for k, v := range x.env {
			if k == "" || strings.ContainsAny(k, "=\x00") || v != nil && strings.ContainsRune(*v, 0) {
				return nil, nil, invalid("env", "env: invalid variable %q", k)
			}
			if v != nil {
				mapped := s.pm.MapCommand(*v)
				v = &mapped
			}
			rs.env[k] = v
		}
	}
	var sess *session
	found := true
	if x.bashAPI && x.sessionID == "" {
		sess, _ = s.sessions.create("", s.homeHost, s.baseEnv, 0)
	} else {
		sess, found = s.sessions.byID(x.sessionID, s.homeHost, s.baseEnv)
	}
	if !found {
		return nil, nil, statusErr(http.StatusNotFound, "unknown session: %s (field %s)", x.sessionID, idField)
	}
	if x.bashAPI && rs.dir != "" {
		sess.chdir(rs.dir)
	}
	c, err := sess.start(s, rs)
	if err != nil {
		return nil, nil, &apiError{status: http.StatusInternalServerError, msg: "could not start the command", err: err}
	}
	return sess, c, nil
}

// hostDir resolves an existing directory for exec_dir / session creation.
func (s *Server) hostDir(field, p string) (string, error) {
	host, virt, err := s.hostPath(field, p, false)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(host)
	if err != nil {
		return "", s.fsError(err, virt)
	}
	if !fi.IsDir() {
		return "", invalid(field, "%s: not a directory: %s", field, virt)
	}
	return host, nil
}

// awaitOpts says how long a request waits for its command.
type awaitOpts struct {
	async    bool
	wait     time.Duration // return "running" after this long (0 = no limit)
	noChange time.Duration // return no_change_timeout after this long without output
}

// await waits for c per o and returns the status to report. With an SSE
// stream it pumps output events as the command writes.
func await(ctx context.Context, c *command, o awaitOpts, sse *sseStream) string {
	if o.async {
		st, _ := c.state()
		return st
	}
	var waitC, quietC, beatC <-chan time.Time
	if o.wait > 0 {
		t := time.NewTimer(o.wait)
		defer t.Stop()
		waitC = t.C
	}
	var quiet *time.Timer
	if o.noChange > 0 {
		quiet = time.NewTimer(o.noChange)
		defer quiet.Stop()
		quietC = quiet.C
	}
	if sse != nil {
		beat := time.NewTicker(sseHeartbeat)
		defer beat.Stop()
		beatC = beat.C
	}
	for {
		changed := c.changed.wait()
		if sse != nil {
			sse.pump(false)
		}
		select {
		case <-c.done:
			st, _ := c.state()
			return st
		case <-ctx.Done():
			return statusRunning
		case <-waitC:
			return statusRunning
		case <-quietC:
			return statusNoChange
		case <-beatC:
			sse.ping()
		case <-changed:
			if quiet != nil {
				quiet.Reset(o.noChange)
			}
		}
	}
}

// exitCodeFor is the exit code to report with status: nil unless the
// command has ended.
func exitCodeFor(c *command, status string) *int {
	if status == statusRunning || status == statusNoChange {
		return nil
	}
	_, code := c.state()
	return code
}

func shellResultOf(sessID string, c *command, status string) shellResult {
	var out strings.Builder
	for _, b := range c.streams {
		out.WriteString(b.String())
	}
	return shellResult{SessionID: sessID, CommandID: c.id, Command: c.text, Status: status,
		Output: out.String(), ExitCode: exitCodeFor(c, status)}
}

func statusMessage(status string, o awaitOpts) string {
	switch status {
	case statusCompleted:
		return "command completed"
	case statusNoChange:
		return fmt.Sprintf("no new output for %s; the command is still running (use /v1/shell/view or /v1/shell/kill)", o.noChange)
	case statusHardTimeout:
		return "command killed: hard timeout reached"
	case statusTerminated:
		return "command terminated"
	}
	return "command is still running (use /v1/shell/view or /v1/shell/kill)"
}

func wantsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *Server) handleShellExec(w http.ResponseWriter, r *http.Request) error {
	var req shellExecReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	cmd, err := required("command", req.Command)
	if err != nil {
		return err
	}
	wait, err := seconds("timeout", req.Timeout)
	if err != nil {
		return err
	}
	hard, err := seconds("hard_timeout", req.HardTimeout)
	if err != nil {
		return err
	}
	noChange, err := seconds("no_change_timeout", req.NoChangeTimeout)
	if err != nil {
		return err
	}
	var sess *session
	var out *cursor
	if lastID := r.Header.Get("Last-Event-ID"); lastID != "" {
		// a client resuming its stream re-sends the exec: attach, never rerun
		if sess, out, err = s.resumeCursor(lastID, req.ID); err != nil {
			return err
		}
	} else {
		var c *command
		if sess, c, err = s.startExec(execReq{sessionID: req.ID, command: cmd, execDir: req.ExecDir, env: req.Env, hard: hard,
			stdin: req.AsyncMode, who: callerOf(r)}, "id"); err != nil {
			return err
		}
		out = newCursor(c)
	}
	c := out.c
	if req.NoChangeTimeout == nil {
		sess.mu.Lock()
		noChange = sess.noChange
		sess.mu.Unlock()
	}
	o := awaitOpts{async: req.AsyncMode, wait: wait, noChange: noChange}
	if wantsSSE(r) {
		streamCommand(w, r, sess.id, out, o)
		return nil
	}
	st := await(r.Context(), c, o, nil)
	ok(w, statusMessage(st, o), shellResultOf(sess.id, c, st))
	return nil
}

// commandOf finds a session's latest command for view/kill.
func (s *Server) commandOf(w http.ResponseWriter, r *http.Request) (*session, *command, error) {
	var req struct {
		ID *string `json:"id"`
	}
	if err := decode(w, r, &req); err != nil {
		return nil, nil, err
	}
	id, err := required("id", req.ID)
	if err != nil {
		return nil, nil, err
	}
	return s.lastCommandOf(id)
}

// lastCommandOf finds session id and its latest command, or a 404.
func (s *Server) lastCommandOf(id string) (*session, *command, error) {
	sess, found := s.sessions.get(id)
	if !found {
		return nil, nil, statusErr(http.StatusNotFound, "unknown session: %s", id)
	}
	c := sess.lastCommand()
	if c == nil {
		return nil, nil, statusErr(http.StatusNotFound, "session %s has not run a command", id)
	}
	return sess, c, nil
}

func (s *Server) handleShellView(w http.ResponseWriter, r *http.Request) error {
	sess, c, err := s.commandOf(w, r)
	if err != nil {
		return err
	}
	if wantsSSE(r) {
		out := newCursor(c)
		if lastID := r.Header.Get("Last-Event-ID"); lastID != "" {
			if _, out, err = s.resumeCursor(lastID, sess.id); err != nil {
				return err
			}
		}
		streamCommand(w, r, sess.id, out, awaitOpts{})
		return nil
	}
	st, _ := c.state()
	ok(w, statusMessage(st, awaitOpts{}), shellResultOf(sess.id, c, st))
	return nil
}

func (s *Server) handleShellKill(w http.ResponseWriter, r *http.Request) error {
	sess, last, err := s.commandOf(w, r)
	if err != nil {
		return err
	}
	killed := 0
	for _, c := range sess.runningCommands() {
		running, err := c.kill(statusTerminated)
		if err != nil {
			return &apiError{status: http.StatusInternalServerError, msg: "could not kill the command", err: err}
		}
		if running {
			killed++
		}
		select {
		case <-c.done:
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	st, code := last.state()
	msg := fmt.Sprintf("terminated %d running command(s)", killed)
	if killed == 0 {
		msg = "no running command"
	}
	res := killResult{shellResult: shellResultOf(sess.id, last, st), Returncode: -1}
	if code != nil {
		res.Returncode = *code
	}
	ok(w, msg, res)
	return nil
}

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request) error {
	var req sessionReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	noChange, err := seconds("no_change_timeout", req.NoChangeTimeout)
	if err != nil {
		return err
	}
	cwd := s.homeHost
	if req.ExecDir != "" {
		if cwd, err = s.hostDir("exec_dir", req.ExecDir); err != nil {
			return err
		}
	}
	sess, created := s.sessions.create(req.ID, cwd, s.baseEnv, noChange)
	msg := "session created"
	if !created {
		msg = "session already exists"
	}
	ok(w, msg, sessionResult{SessionID: sess.id, WorkingDir: s.pm.Unmap(sess.workingDir())})
	return nil
}

func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request) error {
	return s.endSession(w, r.PathValue("session_id"), "session deleted")
}

// endSession forgets session id and kills its running commands.
func (s *Server) endSession(w http.ResponseWriter, id, msg string) error {
	if _, found := s.sessions.remove(id); !found {
		return statusErr(http.StatusNotFound, "unknown session: %s", id)
	}
	s.groups.kill(func(c *command) bool { return c.session == id })
	ok(w, msg, map[string]string{"session_id": id})
	return nil
}

func (s *Server) handleBashExec(w http.ResponseWriter, r *http.Request) error {
	var req bashExecReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	cmd, err := required("command", req.Command)
	if err != nil {
		return err
	}
	wait, err := seconds("timeout", req.Timeout)
	if err != nil {
		return err
	}
	hard, err := seconds("hard_timeout", req.HardTimeout)
	if err != nil {
		return err
	}
	limit := 0
	if req.MaxOutputLength != nil {
		if limit = *req.MaxOutputLength; limit < 0 {
			return invalid("max_output_length", "max_output_length must be >= 0")
		}
	}
	sess, c, err := s.startExec(execReq{sessionID: req.SessionID, command: cmd, execDir: req.ExecDir,
		env: req.Env, hard: hard, separate: true, bashAPI: true, stdin: req.AsyncMode, who: callerOf(r)}, "session_id")
	if err != nil {
		return err
	}
	o := awaitOpts{async: req.AsyncMode, wait: wait}
	st := await(r.Context(), c, o, nil)
	res := bashResult{SessionID: sess.id, CommandID: c.id, Command: c.text, Status: bashStatus(st),
		Stdout: truncateChars(c.streams[0].String(), limit), Stderr: truncateChars(c.streams[1].String(), limit),
		ExitCode: exitCodeFor(c, st), Offset: c.streams[0].size(), StderrOffset: c.streams[1].size()}

	ok(w, statusMessage(st, o), res)
	return nil
}

// truncateChars applies bash/exec's max_output_length: keep the first and
// last limit/2 characters around a marker (0 = no limit).
func truncateChars(s string, limit int) string {
	n := utf8.RuneCountInString(s)
	if limit <= 0 || n <= limit {
		return s
	}
	r := []rune(s)
	head, tail := limit/2, limit-limit/2
	return string(r[:head]) + truncMarker(int64(n-limit), "characters") + string(r[n-tail:])
}
