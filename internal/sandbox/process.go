package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Command statuses reported by the shell API.
const (
	statusRunning     = "running"
	statusCompleted   = "completed"
	statusNoChange    = "no_change_timeout"
	statusHardTimeout = "hard_timeout"
	statusTerminated  = "terminated"
)

// drainGrace is how long a finished command's output pipe is drained before
// the result is returned. Background children (`server &`) may keep the
// pipe open for good; their later output still lands in the command's
// buffer, visible through /v1/shell/view. Past the grace the drain goes on
// while a pipe still holds unread bytes or its reader holds some it has
// not stored (a busy machine may not have scheduled the reader yet), up to
// drainMax: output written before the shell exited is never cut off.
const (
	drainGrace = 100 * time.Millisecond
	drainMax   = 5 * time.Second
)

// pipeReader copies one output pipe into its buffer. idle is true while it
// holds no bytes of its own: parked in Read, or finished.
type pipeReader struct {
	f    *os.File
	idle atomic.Bool
	// wrote is the command's last-output time (UnixNano), for activity.
	wrote *atomic.Int64
}

func (p *pipeReader) copyTo(dst *outBuf) {
	defer p.idle.Store(true)
	buf := make([]byte, 32<<10)
	for {
		p.idle.Store(true)
		n, err := p.f.Read(buf)
		p.idle.Store(false)
		if n > 0 {
			_, _ = dst.Write(buf[:n])
			p.wrote.Store(time.Now().UnixNano())
		}
		if err != nil {
			return
		}
	}
}

// quiet: nothing written so far is still on its way into the buffer.
func (p *pipeReader) quiet() bool { return p.idle.Load() && unread(p.f) == 0 }

// shellScript runs the user command ($1) through eval, so a syntax error is
// an ordinary failure, and on any exit dumps the shell's cwd and exported
// environment to the state file ($2), which the server reads back into the
// session. The exit code is passed through untouched.
const shellScript = `__sg_cmd=$1; __sg_state=$2; shift 2
trap '__sg_rc=$?; { pwd; printf "\0"; env -0; } >"$__sg_state" 2>/dev/null; exit $__sg_rc' EXIT
eval "$__sg_cmd"`

type shellInfo struct{ path, name string }

// detectShell picks the first of zsh, bash, sh on PATH (busybox sh in
// minimal images).
func detectShell() (shellInfo, error) {
	for _, name := range []string{"zsh", "bash", "sh"} {
		if p, err := exec.LookPath(name); err == nil {
			return shellInfo{path: p, name: name}, nil
		}
	}
	return shellInfo{}, errors.New("no shell (zsh, bash or sh) found on PATH")
}

// shellState is what a command's epilogue reports back.
type shellState struct {
	cwd string
	env []string
}

// volatileEnv are variables the shell maintains itself; persisting them
// would only make them drift (SHLVL would grow by one per command).
var volatileEnv = map[string]bool{"PWD": true, "SHLVL": true, "_": true}

func readState(file string) (shellState, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return shellState{}, fmt.Errorf("read shell state: %w", err)
	}
	cwd, envs, ok := bytes.Cut(data, []byte{0})
	st := shellState{cwd: strings.TrimSuffix(string(cwd), "\n")}
	if !ok || !filepath.IsAbs(st.cwd) {
		return shellState{}, errors.New("malformed shell state")
	}
	for _, kv := range bytes.Split(envs, []byte{0}) {
		name, _, ok := bytes.Cut(kv, []byte{'='})
		if ok && len(name) > 0 && !volatileEnv[string(name)] {
			st.env = append(st.env, string(kv))
		}
	}
	return st, nil
}

// command is one running or finished shell command.
type command struct {
	id      string
	session string // owning session id
	text    string // as submitted, virtual paths
	seq     uint64 // start order within its session
	streams []*outBuf
	changed *signal
	done    chan struct{}
	pgid    int
	timer   *time.Timer

	mu       sync.Mutex
	finished bool
	killedAs string // status to report once our kill took effect
	exitCode int

	inMu  sync.Mutex // held across a stdin write, apart from mu
	stdin *os.File   // write end of an async command's stdin; nil = none or closed

	wrote atomic.Int64 // last output (UnixNano); see activity.go
	prog  progress
}

type startSpec struct {
	id, session  string
	text, mapped string
	dir          string
	env          []string
	separate     bool // stdout and stderr kept apart (bash/exec)
	stdin        bool // a pipe the client writes through shell/write, bash/write
	hardTimeout  time.Duration
	stateFile    string
	maxOutput    int64
	pm           *PathMap
}

// startCommand launches the command in its own process group, registered in
// reg until every holder of its output pipes closed them (then the group has
// no members left that we know of). onExit runs after the process ended and
// its output was drained, before done closes.
func startCommand(sh shellInfo, sp startSpec, reg *groups, onExit func(*command)) (*command, error) {
	c := &command{id: sp.id, session: sp.session, text: sp.text, changed: newSignal(), done: make(chan struct{})}
	n := 1
	if sp.separate {
		n = 2
	}
	var readers, writers []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(readers)
			closeAll(writers)
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		readers, writers = append(readers, r), append(writers, w)
		c.streams = append(c.streams, newOutBuf(sp.maxOutput, sp.pm, c.changed))
	}
	cmd := exec.Command(sh.path, "-c", limitedScript(shellScript), sh.name, sp.mapped, sp.stateFile)
	cmd.Dir, cmd.Env = sp.dir, sp.env
	cmd.Stdout, cmd.Stderr = writers[0], writers[n-1]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sp.stdin {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(readers)
			closeAll(writers)
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		cmd.Stdin, c.stdin = r, w
		writers = append(writers, r) // closed below like the output ends
	}
	err := startOwned(cmd)
	closeAll(writers) // the child holds its own copies
	if err != nil {
		closeAll(readers)
		if c.stdin != nil {
			_ = c.stdin.Close()
		}
		return nil, fmt.Errorf("start shell: %w", err)
	}
	c.pgid = cmd.Process.Pid
	c.wrote.Store(time.Now().UnixNano())
	reg.add(c)

	var wg sync.WaitGroup
	pipes := make([]*pipeReader, len(readers))
	for i, r := range readers {
		pipes[i] = &pipeReader{f: r, wrote: &c.wrote}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipes[i].copyTo(c.streams[i])
			_ = r.Close()
			c.streams[i].flush()
		}()
	}
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
		reg.remove(c)
	}()
	if sp.hardTimeout > 0 {
		c.timer = time.AfterFunc(sp.hardTimeout, func() {
			if _, err := c.kill(statusHardTimeout); err != nil {
				slog.Error("hard timeout", "command", c.id, "err", err)
			}
		})
	}
	go c.wait(cmd, pipes, drained, onExit)
	return c, nil
}

// awaitDrain returns once every pipe reached EOF, or, past drainGrace, once
// nothing already written is still in flight (see drainGrace).
func awaitDrain(pipes []*pipeReader, drained <-chan struct{}) {
	grace := time.NewTimer(drainGrace)
	defer grace.Stop()
	select {
	case <-drained:
		return
	case <-grace.C:
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(drainMax); time.Now().Before(deadline); {
		quiet := true
		for _, p := range pipes {
			quiet = quiet && p.quiet()
		}
		if quiet {
			return
		}
		select {
		case <-drained:
			return
		case <-tick.C:
		}
	}
}

func (c *command) wait(cmd *exec.Cmd, pipes []*pipeReader, drained <-chan struct{}, onExit func(*command)) {
	_ = waitOwned(cmd)
	if c.timer != nil {
		c.timer.Stop()
	}
	awaitDrain(pipes, drained)
	for _, s := range c.streams {
		s.flush()
	}
	code := -1
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		code = ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	c.mu.Lock()
	c.finished, c.exitCode = true, code
	c.mu.Unlock()
	c.inMu.Lock()
	if c.stdin != nil {
		_ = c.stdin.Close()
		c.stdin = nil
	}
	c.inMu.Unlock()
	onExit(c)
	close(c.done)
	c.changed.fire()
}

// kill SIGKILLs the command's whole process group, background children
// included, and records why: the one way kill requests, timeouts and
// session ends stop a command. It reports whether the command was running.
func (c *command) kill(reason string) (bool, error) {
	return c.signal(syscall.SIGKILL, reason)
}

// signal sends sig to the command's process group (from osthread's thread, see
// signalGroup). A reason marks a signal that ends commands: once sent, the
// command's status is the reason and its state is not committed. It reports
// whether the command was running; a signal that could not be sent leaves
// the command as it was.
func (c *command) signal(sig syscall.Signal, reason string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return false, nil
	}
	if err := signalGroup(c.pgid, sig); errors.Is(err, syscall.ESRCH) {
		return false, nil // its group is gone; Wait has not marked it finished yet
	} else if err != nil {
		return true, err
	}
	if reason != "" && c.killedAs == "" {
		c.killedAs = reason
	}
	return true, nil
}

// errNoStdin: the command takes no input (it ended, or it was not started
// with async_mode and reads /dev/null).
var errNoStdin = errors.New("the command is not running with an input pipe")

// write sends input to the command's stdin. It fails once the command
// ended, and when its stdin is not a pipe.
func (c *command) write(input string) error {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if c.stdin == nil {
		return errNoStdin
	}
	// a program that stopped reading must not block the handler
	_ = c.stdin.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.stdin, input); err != nil {
		return fmt.Errorf("write stdin: %w", err)
	}
	return nil
}

// state returns the status and exit code (nil while running).
func (c *command) state() (string, *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.finished {
		return statusRunning, nil
	}
	code := c.exitCode
	if c.killedAs != "" {
		return c.killedAs, &code
	}
	return statusCompleted, &code
}

// killedByUs reports whether the command ended through our kill (its state
// epilogue did not run, so it must not be committed).
func (c *command) killedByUs() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killedAs != ""
}

// groups tracks process groups that may still have members (background
// children of finished commands), so shutdown and session deletion can kill
// them. A pgid is only killed while registered to the command that created
// it: the kernel does not reuse a pgid while its group exists, and a newer
// command that got the same number replaces the entry.
type groups struct {
	mu sync.Mutex
	m  map[int]*command
}

func (g *groups) add(c *command) {
	g.mu.Lock()
	g.m[c.pgid] = c
	g.mu.Unlock()
}

func (g *groups) remove(c *command) {
	g.mu.Lock()
	if g.m[c.pgid] == c {
		delete(g.m, c.pgid)
	}
	g.mu.Unlock()
}

// kill SIGKILLs every registered group whose command matches.
func (g *groups) kill(match func(*command) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pgid, c := range g.m {
		if match(c) {
			if running, _ := c.kill(statusTerminated); !running {
				// a finished command's group may still hold its background children
				_ = signalGroup(pgid, syscall.SIGKILL)
			}
		}
	}
}
