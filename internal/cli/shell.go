package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"
)

// exec and shell drive the sandbox's WebSocket terminal (GET
// /v1/shell/ws through /threads/{thread}/v1): each text message sent is one
// command line; the answers are its output as it comes, then
// {"type":"exit","exit_code":N} or {"type":"error",...}. Both run in a
// shell session of their own, deleted at the end, so neither moves the
// agent's default session (its cwd and exports).

// exitStatus ends the CLI with a remote command's exit code, already shown.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func runExec(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newThreadFlags(env, "exec", "exec THREAD -- COMMAND [ARG...]   (output streams as it comes, stdout and stderr together;\n"+
		"the exit code is the command's. One argument is a shell command line as is: exec t -- 'ls | wc -l')", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("exec: want a thread id and a command: exec THREAD -- COMMAND")
	}
	line := pos[1]
	if len(pos) > 2 {
		line = shellJoin(pos[1:])
	}
	t, err := openTerminal(ctx, c, pos[0])
	if err != nil {
		return err
	}
	defer t.close()
	code, err := t.run(line, env.Stdout)
	if err != nil {
		return err
	}
	if code != 0 {
		return exitStatus(code)
	}
	return nil
}

func runShell(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newThreadFlags(env, "shell", "shell THREAD   (one command line at a time, as typed; exit or Ctrl-D leaves, Ctrl-C kills it all.\n"+
		"The sandbox has no terminal device: COLUMNS and LINES follow this window's size)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("shell: want exactly one thread id")
	}
	t, err := openTerminal(ctx, c, pos[0])
	if err != nil {
		return err
	}
	defer t.close()
	// A resize (SIGWINCH) marks the size stale; it is sent, as exports the
	// session keeps, before the next line, so the commands run after it
	// format for the new width.
	var resized atomic.Bool
	resized.Store(true)
	winch := make(chan os.Signal, 1)
	if env.TermSize != nil {
		signal.Notify(winch, syscall.SIGWINCH)
		defer func() { signal.Stop(winch); close(winch) }() // ends the goroutine below
		go func() {
			for range winch {
				resized.Store(true)
			}
		}()
	}
	in := bufio.NewScanner(env.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	last := 0
	for {
		if env.StdinTTY {
			fmt.Fprintf(env.Stderr, "%s$ ", pos[0])
		}
		if !in.Scan() {
			if env.StdinTTY {
				fmt.Fprintln(env.Stderr)
			}
			break
		}
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		if line == "exit" || line == "logout" {
			break
		}
		if env.TermSize != nil && resized.Swap(false) {
			if cols, rows, ok := env.TermSize(); ok {
				if _, err := t.run(fmt.Sprintf("export COLUMNS=%d LINES=%d", cols, rows), io.Discard); err != nil {
					return err
				}
			}
		}
		if last, err = t.run(line, env.Stdout); err != nil {
			return err
		}
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if last != 0 {
		return exitStatus(last) // as a shell ends with its last command's status
	}
	return nil
}

// terminal is an open WebSocket terminal on a session of its own.
type terminal struct {
	ctx     context.Context
	cl      *client
	thread  string
	session string
	conn    *websocket.Conn
}

// openTerminal creates a session in the thread's sandbox (the gateway
// starts the sandbox if it has none) and opens its terminal.
func openTerminal(ctx context.Context, c common, thread string) (*terminal, error) {
	cl, err := threadClient(c)
	if err != nil {
		return nil, err
	}
	t := &terminal{ctx: ctx, cl: cl, thread: thread}
	var created struct {
		Data struct {
			SessionID string `json:"session_id"`
		} `json:"data"`
	}
	if err := cl.send(ctx, "POST", t.v1()+"/shell/sessions/create", nil, struct{}{}, &created); err != nil {
		return nil, err
	}
	t.session = created.Data.SessionID
	if t.session == "" {
		return nil, errors.New("the sandbox created no shell session")
	}
	u := *cl.base
	u.Path += t.v1() + "/shell/ws"
	u.RawQuery = url.Values{"id": {t.session}}.Encode()
	hdr := http.Header{}
	if cl.token != "" {
		hdr.Set("Authorization", "Bearer "+cl.token)
	}
	dctx, cancel := context.WithTimeout(ctx, cl.timeout)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.deleteSession()
		if resp != nil && resp.StatusCode >= 300 {
			e := decodeError(resp)
			e.credential = cl.credential
			return nil, e
		}
		return nil, fmt.Errorf("open the terminal: %w", err)
	}
	conn.SetReadLimit(1 << 20)
	t.conn = conn
	return t, nil
}

func (t *terminal) v1() string { return threadPath(t.thread) + "/v1" }

// run sends one command line and copies its output to out until it ends;
// the answer is its exit code.
func (t *terminal) run(line string, out io.Writer) (int, error) {
	if err := t.conn.Write(t.ctx, websocket.MessageText, []byte(line)); err != nil {
		return 0, fmt.Errorf("send the command: %w", err)
	}
	for {
		_, msg, err := t.conn.Read(t.ctx)
		if err != nil {
			return 0, fmt.Errorf("the terminal closed: %w", err)
		}
		if len(msg) > 1 && msg[0] == '{' { // output never starts with "{" but "{" itself
			var res struct {
				Type     string `json:"type"`
				ExitCode *int   `json:"exit_code"`
				Message  string `json:"message"`
			}
			if err := json.Unmarshal(msg, &res); err != nil {
				return 0, fmt.Errorf("the terminal answered %q: %w", msg, err)
			}
			if res.Type == "error" {
				return 0, fmt.Errorf("the sandbox could not run the command: %s", res.Message)
			}
			if res.ExitCode == nil {
				return -1, nil // killed: no code
			}
			return *res.ExitCode, nil
		}
		if _, err := out.Write(msg); err != nil {
			return 0, err
		}
	}
}

// close closes the socket (the server kills a command still running) and
// deletes the session.
func (t *terminal) close() {
	_ = t.conn.Close(websocket.StatusNormalClosure, "")
	t.deleteSession()
}

func (t *terminal) deleteSession() {
	// Not bound to t.ctx: an interrupted command still cleans up.
	ctx, cancel := context.WithTimeout(context.Background(), t.cl.timeout)
	defer cancel()
	_ = t.cl.call(ctx, "DELETE", t.v1()+"/shell/sessions/"+url.PathEscape(t.session), nil, nil)
}

// shellJoin quotes each argument for a POSIX shell: exec's argv form.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			quoted[i] = a
			continue
		}
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(quoted, " ")
}
