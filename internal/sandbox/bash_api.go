package sandbox

import (
	"fmt"
	"net/http"
	"syscall"
	"time"
)

// AIO's bash session API around bash/exec: sessions/create, sessions,
// sessions/{id}/close, output (offset-based polling of a command started
// with async_mode or past its timeout), write (stdin of an async_mode
// command) and kill (a signal to the session's running commands). Bash
// sessions are the same sessions as the shell API's.

// bashSessionInfo is AIO's BashSessionInfo.
type bashSessionInfo struct {
	SessionID      string  `json:"session_id"`
	Status         string  `json:"status"` // ready (closed sessions are gone)
	WorkingDir     string  `json:"working_dir"`
	CreatedAt      string  `json:"created_at"`
	LastUsedAt     string  `json:"last_used_at"`
	CurrentCommand *string `json:"current_command"`
	CommandCount   int     `json:"command_count"`
}

func (s *Server) bashInfo(sess *session) bashSessionInfo {
	in := s.info(sess, time.Now())
	return bashSessionInfo{SessionID: sess.id, Status: "ready", WorkingDir: in.WorkingDir, CreatedAt: in.CreatedAt,
		LastUsedAt: in.LastUsedAt, CurrentCommand: in.CurrentCommand, CommandCount: in.CommandCount}
}

func (s *Server) handleBashSessionCreate(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		SessionID    string      `json:"session_id"`
		ExecDir      string      `json:"exec_dir"`
		SnapshotPath unsupported `json:"snapshot_path"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	cwd := s.homeHost
	if req.ExecDir != "" {
		var err error
		if cwd, err = s.hostDir("exec_dir", req.ExecDir); err != nil {
			return err
		}
	}
	sess, created := s.sessions.create(req.SessionID, cwd, s.baseEnv, 0)
	msg := "session created"
	if !created {
		msg = "session already exists"
	}
	ok(w, msg, s.bashInfo(sess))
	return nil
}

func (s *Server) handleBashSessions(w http.ResponseWriter, _ *http.Request) error {
	out := []bashSessionInfo{}
	for _, sess := range s.sessions.all() {
		out = append(out, s.bashInfo(sess))
	}
	ok(w, "sessions listed", out)
	return nil
}

func (s *Server) closeBashSession(w http.ResponseWriter, r *http.Request) error {
	return s.endSession(w, r.PathValue("session_id"), "session closed")
}

// bashCommand finds a session's command: command_id, or the latest one.
func (s *Server) bashCommand(sessionID *string, commandID string) (*session, *command, error) {
	id, err := required("session_id", sessionID)
	if err != nil {
		return nil, nil, err
	}
	sess, found := s.sessions.get(id)
	if !found {
		return nil, nil, statusErr(http.StatusNotFound, "unknown session: %s", id)
	}
	c := sess.lastCommand()
	if commandID != "" && (c == nil || c.id != commandID) {
		c = nil
		for _, rc := range sess.runningCommands() {
			if rc.id == commandID {
				c = rc
			}
		}
	}
	if c == nil {
		return nil, nil, statusErr(http.StatusNotFound, "no such command in session %s", id)
	}
	return sess, c, nil
}

type bashCommandInfo struct {
	CommandID string `json:"command_id"`
	Command   string `json:"command"`
	Status    string `json:"status"`
	ExitCode  *int   `json:"exit_code"`
}

type bashOutputResult struct {
	SessionID    string          `json:"session_id"`
	Stdout       string          `json:"stdout"`
	Stderr       string          `json:"stderr"`
	Offset       int64           `json:"offset"`
	StderrOffset int64           `json:"stderr_offset"`
	Command      bashCommandInfo `json:"command"`
}

// bashStatus is a command state in AIO's bash CommandStatus names.
func bashStatus(st string) string {
	switch st {
	case statusHardTimeout:
		return "timed_out"
	case statusTerminated:
		return "killed"
	}
	return st
}

// handleBashOutput returns a command's output from the given offsets; with
// wait it long-polls until there is more, the command ends, or
// wait_timeout (default 30 s) passes.
func (s *Server) handleBashOutput(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		SessionID    *string  `json:"session_id"`
		CommandID    string   `json:"command_id"`
		Offset       int64    `json:"offset"`
		StderrOffset int64    `json:"stderr_offset"`
		Wait         bool     `json:"wait"`
		WaitTimeout  *float64 `json:"wait_timeout"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Offset < 0 || req.StderrOffset < 0 {
		return invalid("offset", "offset and stderr_offset must be >= 0")
	}
	sess, c, err := s.bashCommand(req.SessionID, req.CommandID)
	if err != nil {
		return err
	}
	if req.Wait {
		limit := 30 * time.Second
		if req.WaitTimeout != nil {
			if limit, err = seconds("wait_timeout", req.WaitTimeout); err != nil {
				return err
			}
		}
		waitForOutput(r, c, req.Offset, req.StderrOffset, limit)
	}
	res := bashOutputResult{SessionID: sess.id}
	out, next := c.streams[0].readFrom(req.Offset)
	res.Stdout, res.Offset = string(out), next
	res.StderrOffset = req.StderrOffset
	if len(c.streams) > 1 {
		errOut, next := c.streams[1].readFrom(req.StderrOffset)
		res.Stderr, res.StderrOffset = string(errOut), next
	}
	st, _ := c.state()
	res.Command = bashCommandInfo{CommandID: c.id, Command: c.text, Status: bashStatus(st), ExitCode: exitCodeFor(c, st)}
	ok(w, "output read", res)
	return nil
}

// waitForOutput blocks until c has output past the offsets, has ended, the
// limit passed or the client left.
func waitForOutput(r *http.Request, c *command, off, errOff int64, limit time.Duration) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		changed := c.changed.wait()
		if c.streams[0].size() > off || len(c.streams) > 1 && c.streams[1].size() > errOff {
			return
		}
		select {
		case <-c.done:
			return
		case <-timer.C:
			return
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

func (s *Server) handleBashWrite(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		SessionID *string `json:"session_id"`
		CommandID string  `json:"command_id"`
		Input     *string `json:"input"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Input == nil {
		return missing("input")
	}
	_, c, err := s.bashCommand(req.SessionID, req.CommandID)
	if err != nil {
		return err
	}
	if err := writeInput(c, *req.Input); err != nil {
		return err
	}
	ok(w, "input written", map[string]string{"command_id": c.id})
	return nil
}

// signals bash/kill accepts; those that end a command mark it killed.
var signals = map[string]struct {
	sig  syscall.Signal
	ends bool
}{
	"SIGTERM": {syscall.SIGTERM, true}, "SIGKILL": {syscall.SIGKILL, true}, "SIGINT": {syscall.SIGINT, true},
	"SIGHUP": {syscall.SIGHUP, true}, "SIGQUIT": {syscall.SIGQUIT, true},
	"SIGUSR1": {syscall.SIGUSR1, false}, "SIGUSR2": {syscall.SIGUSR2, false},
}

func (s *Server) handleBashKill(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		SessionID *string `json:"session_id"`
		Signal    *string `json:"signal"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	name := "SIGTERM"
	if req.Signal != nil {
		name = *req.Signal
	}
	sg, known := signals[name]
	if !known {
		return invalid("signal", "signal must be one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2")
	}
	sess, _, err := s.bashCommand(req.SessionID, "")
	if err != nil {
		return err
	}
	reason := ""
	if sg.ends {
		reason = statusTerminated
	}
	n := 0
	for _, c := range sess.runningCommands() {
		running, err := c.signal(sg.sig, reason)
		if err != nil {
			return &apiError{status: http.StatusInternalServerError, msg: "could not signal the command", err: fmt.Errorf("%s: %w", name, err)}
		}
		if running {
			n++
		}
	}
	ok(w, "signal sent", map[string]any{"session_id": sess.id, "signal": name, "signalled": n})
	return nil
}
