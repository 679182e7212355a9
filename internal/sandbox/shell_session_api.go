package sandbox

import (
	"errors"
	"net/http"
	"time"
)

// Shell session management beyond exec/view/kill, as AIO's shell API:
// write_to_process, wait_for_process, list_sessions, cleanup_all_sessions,
// get_session_stats. Input reaches a command only when it was started with
// async_mode (its stdin is then a pipe); a synchronous command reads
// /dev/null, so a stray read never hangs a call.

// sessionIdle is how long a session may go unused before the stats count
// it idle (AIO: "active = used within the last 5 minutes").
const sessionIdle = 5 * time.Minute

type shellWriteReq struct {
	ID         *string `json:"id"`
	Input      *string `json:"input"`
	PressEnter *bool   `json:"press_enter"`
}

type statusResult struct {
	Status string `json:"status"`
}

func (s *Server) handleShellWrite(w http.ResponseWriter, r *http.Request) error {
	var req shellWriteReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id, err := required("id", req.ID)
	if err != nil {
		return err
	}
	if req.Input == nil {
		return missing("input")
	}
	if req.PressEnter == nil {
		return missing("press_enter")
	}
	_, c, err := s.lastCommandOf(id)
	if err != nil {
		return err
	}
	input := *req.Input
	if *req.PressEnter {
		input += "\n"
	}
	if err := writeInput(c, input); err != nil {
		return err
	}
	st, _ := c.state()
	ok(w, "input written", statusResult{Status: st})
	return nil
}

// writeInput maps a stdin write failure to its answer.
func writeInput(c *command, input string) error {
	err := c.write(input)
	if errors.Is(err, errNoStdin) {
		return statusErr(http.StatusConflict, "the command takes no input: it has ended or was not started with async_mode")
	}
	if err != nil {
		return &apiError{status: http.StatusConflict, msg: "the command did not accept the input", err: err}
	}
	return nil
}

type shellWaitReq struct {
	ID             *string  `json:"id"`
	Seconds        *float64 `json:"seconds"`
	MaxWaitSeconds *float64 `json:"max_wait_seconds"`
}

// handleShellWait waits for the session's latest command to end, at most
// seconds (or max_wait_seconds; neither = until it ends or the client
// goes), and answers its status.
func (s *Server) handleShellWait(w http.ResponseWriter, r *http.Request) error {
	var req shellWaitReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id, err := required("id", req.ID)
	if err != nil {
		return err
	}
	wait, err := seconds("seconds", req.Seconds)
	if err != nil {
		return err
	}
	if wait == 0 {
		if wait, err = seconds("max_wait_seconds", req.MaxWaitSeconds); err != nil {
			return err
		}
	}
	_, c, err := s.lastCommandOf(id)
	if err != nil {
		return err
	}
	st := await(r.Context(), c, awaitOpts{wait: wait}, nil)
	ok(w, statusMessage(st, awaitOpts{}), statusResult{Status: st})
	return nil
}

// shellSessionInfo is AIO's ShellSessionInfo.
type shellSessionInfo struct {
	WorkingDir     string  `json:"working_dir"`
	CreatedAt      string  `json:"created_at"`
	LastUsedAt     string  `json:"last_used_at"`
	AgeSeconds     int     `json:"age_seconds"`
	Status         string  `json:"status"` // active | idle
	CurrentCommand *string `json:"current_command"`
	CommandCount   int     `json:"command_count"`
}

// info snapshots a session for the listings.
func (s *Server) info(sess *session, now time.Time) shellSessionInfo {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	in := shellSessionInfo{WorkingDir: s.pm.Unmap(sess.cwd), CreatedAt: sess.created.UTC().Format(time.RFC3339),
		LastUsedAt: sess.lastUsed.UTC().Format(time.RFC3339), AgeSeconds: int(now.Sub(sess.created).Seconds()),
		Status: "idle", CommandCount: sess.commands}
	if len(sess.running) > 0 && sess.last != nil {
		cmd := sess.last.text
		in.CurrentCommand = &cmd
	}
	if len(sess.running) > 0 || now.Sub(sess.lastUsed) < sessionIdle {
		in.Status = "active"
	}
	return in
}

func (s *Server) handleShellSessions(w http.ResponseWriter, _ *http.Request) error {
	now := time.Now()
	out := map[string]shellSessionInfo{}
	for _, sess := range s.sessions.all() {
		out[sess.id] = s.info(sess, now)
	}
	ok(w, "sessions listed", map[string]any{"sessions": out})
	return nil
}

// handleShellSessionsCleanup removes every session and kills their commands
// (the default session comes back fresh on next use).
func (s *Server) handleShellSessionsCleanup(w http.ResponseWriter, _ *http.Request) error {
	n := 0
	for _, sess := range s.sessions.all() {
		if _, found := s.sessions.remove(sess.id); found {
			n++
		}
		s.groups.kill(func(c *command) bool { return c.session == sess.id })
	}
	ok(w, "sessions cleaned up", map[string]int{"cleaned_sessions": n})
	return nil
}

type sessionStats struct {
	Total          int     `json:"total_sessions"`
	Active         int     `json:"active_sessions"`
	Idle           int     `json:"idle_sessions"`
	Max            int     `json:"max_sessions"`
	SessionTimeout int     `json:"session_timeout"`
	UsageRatio     float64 `json:"usage_ratio"`
}

// handleShellSessionStats: sessions do not time out here (they are evicted
// beyond maxSessions), so session_timeout is 0.
func (s *Server) handleShellSessionStats(w http.ResponseWriter, _ *http.Request) error {
	now := time.Now()
	st := sessionStats{Max: maxSessions}
	for _, sess := range s.sessions.all() {
		st.Total++
		if s.info(sess, now).Status == "active" {
			st.Active++
		} else {
			st.Idle++
		}
	}
	st.UsageRatio = float64(st.Total) / float64(maxSessions)
	ok(w, "session stats", st)
	return nil
}
