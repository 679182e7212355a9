package sandbox

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxSessions bounds the sessions kept (each holds its last command's
// output). Beyond the bound idle sessions are evicted: generated ones
// (created without a client-chosen id) first, then named ones, least
// recently used first. Sessions with a running command and the default
// session are never evicted.
const maxSessions = 64

// session is a shell session: a cwd and an exported environment carried from
// one command to the next. Every command runs as a fresh `shell -c` process
// started from the session's state and reports its final state back; a
// bash/exec command's report is dropped (runSpec.stateless), so through the
// bash API a session keeps only its default dir.
//
// Concurrency is fork, not serialize: a call on a session that is already
// running a command starts at once from a snapshot of the session state, so
// a long or stuck command never blocks the next one and each call gets its
// own output and exit code. When commands overlap, the state of the
// most recently started command that finished normally wins; a command that
// was killed (hard_timeout, kill) leaves the state untouched.
type session struct {
	id        string
	generated bool // created without a client-chosen id

	mu        sync.Mutex
	cwd       string   // host path
	env       []string // exported environment, KEY=VALUE
	noChange  time.Duration
	seq       uint64 // commands started
	committed uint64 // seq of the command whose state the session holds
	running   map[*command]bool
	last      *command
	lastUsed  time.Time
	created   time.Time
	commands  int // commands started
}

// sessionStore holds the sessions of one server.
type sessionStore struct {
	mu sync.Mutex
	m  map[string]*session
	// defaultID names the session shared by every call that gives no
	// session id, as in the all-in-one sandbox: DeerFlow sends none and
	// expects `cd` in one call to hold in the next. It is made on first use
	// (again after a DELETE, which resets it) and never evicted.
	defaultID string
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// create returns the session with this id, making it (with cwd and env) if
// it does not exist. An empty id gets a generated one.
func (st *sessionStore) create(id, cwd string, env []string, noChange time.Duration) (*session, bool) {
	generated := id == ""
	if generated {
		id = newID()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.m[id]; ok {
		s.touch()
		return s, false
	}
	st.evictLocked()
	s := &session{id: id, generated: generated, cwd: cwd, env: env, noChange: noChange, running: map[*command]bool{}, lastUsed: time.Now(), created: time.Now()}
	st.m[id] = s
	return s, true
}

// byID returns the session with this id; an empty id means the default
// session, made on demand from cwd and env.
func (st *sessionStore) byID(id, cwd string, env []string) (*session, bool) {
	if id == "" {
		s, _ := st.create(st.defaultID, cwd, env, 0)
		return s, true
	}
	return st.get(id)
}

func (st *sessionStore) get(id string) (*session, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.m[id]
	if ok {
		s.touch()
	}
	return s, ok
}

func (st *sessionStore) remove(id string) (*session, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.m[id]
	delete(st.m, id)
	return s, ok
}

func (st *sessionStore) all() []*session {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*session, 0, len(st.m))
	for _, s := range st.m {
		out = append(out, s)
	}
	return out
}

// command finds a command by id among every session's latest and running
// ones (what a session keeps), with its session; nil if none has it.
func (st *sessionStore) command(id string) (*session, *command) {
	for _, s := range st.all() {
		if c := s.lastCommand(); c != nil && c.id == id {
			return s, c
		}
		for _, c := range s.runningCommands() {
			if c.id == id {
				return s, c
			}
		}
	}
	return nil, nil
}

// evictLocked drops idle sessions, oldest first, to make room for one more.
func (st *sessionStore) evictLocked() {
	if len(st.m) < maxSessions {
		return
	}
	type idle struct {
		id        string
		generated bool
		used      time.Time
	}
	var cands []idle
	for id, s := range st.m {
		s.mu.Lock()
		if len(s.running) == 0 && id != st.defaultID {
			cands = append(cands, idle{id, s.generated, s.lastUsed})
		}
		s.mu.Unlock()
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].generated != cands[j].generated {
			return cands[i].generated
		}
		return cands[i].used.Before(cands[j].used)
	})
	for _, c := range cands[:min(len(cands), len(st.m)-maxSessions+1)] {
		delete(st.m, c.id)
	}
}

func (s *session) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

func (s *session) workingDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cwd
}

// lastCommand is the most recently started command (nil if none).
func (s *session) lastCommand() *command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// runningCommands is a snapshot of the commands still running.
func (s *session) runningCommands() []*command {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*command, 0, len(s.running))
	for c := range s.running {
		out = append(out, c)
	}
	return out
}

// chdir moves the session to dir (a host path) as if a `cd` started now had
// finished: commands already running no longer commit their state.
func (s *session) chdir(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.committed = s.seq
	s.cwd = dir
}

// runSpec is one command to start in a session.
type runSpec struct {
	text, mapped string
	dir          string             // host dir; "" = the session's cwd
	env          map[string]*string // this command only; nil value unsets
	separate     bool
	stdin        bool
	hardTimeout  time.Duration
	// stateless: the command's final cwd and environment are not committed
	// to the session (bash/exec, per AIO's BashExecRequest: "`cd` or
	// `export` inside a command do NOT affect subsequent calls").
	stateless bool
	who       string // the caller, for the command's record (cmdlog.go)
}

// start launches a command from the session's current state.
func (s *session) start(srv *Server, rs runSpec) (*command, error) {
	sh, err := srv.shell()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := rs.dir
	if dir == "" {
		dir = s.cwd
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = srv.homeHost // the saved cwd was removed
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			dir = "/"
		}
	}
	base := s.env
	s.seq++
	id := newID()
	sp := startSpec{
		id: id, session: s.id, text: rs.text, mapped: rs.mapped, dir: dir,
		env:      commandEnv(base, rs.env, dir),
		separate: rs.separate, stdin: rs.stdin,
		stateFile: filepath.Join(srv.ensureStateDir(), id),
		maxOutput: srv.maxOutput, pm: srv.pm, hardTimeout: rs.hardTimeout,
	}
	seq := s.seq
	started := time.Now()
	c, err := startCommand(sh, sp, &srv.groups, func(c *command) {
		s.finish(c, sp.stateFile, base, rs)
		srv.recordEnded(c, rs.who, started)
	})
	if err != nil {
		return nil, err
	}
	c.seq = seq
	s.commands++
	s.running[c] = true
	s.last = c
	s.lastUsed = time.Now()
	return c, nil
}

// finish commits a finished command's reported state, unless the command is
// stateless, was killed or a later-started command already committed.
func (s *session) finish(c *command, stateFile string, base []string, rs runSpec) {
	st, err := readState(stateFile)
	_ = os.Remove(stateFile)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, c)
	s.lastUsed = time.Now()
	if rs.stateless || err != nil || c.killedByUs() || c.seq <= s.committed {
		return
	}
	s.committed = c.seq
	s.cwd = st.cwd
	s.env = revertEnv(st.env, base, rs.env)
}

// commandEnv is the session env with the per-command overrides and PWD set.
func commandEnv(base []string, perCmd map[string]*string, dir string) []string {
	env := make([]string, 0, len(base)+len(perCmd)+1)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, override := perCmd[name]; !override && name != "PWD" {
			env = append(env, kv)
		}
	}
	for k, v := range perCmd {
		if v != nil {
			env = append(env, k+"="+*v)
		}
	}
	return append(env, "PWD="+dir)
}

// revertEnv undoes per-command variables in a reported env: each takes back
// its session value (or disappears), so they never persist.
func revertEnv(reported, base []string, perCmd map[string]*string) []string {
	if len(perCmd) == 0 {
		return reported
	}
	out := make([]string, 0, len(reported))
	for _, kv := range reported {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := perCmd[name]; !ok {
			out = append(out, kv)
		}
	}
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := perCmd[name]; ok {
			out = append(out, kv)
		}
	}
	return out
}
