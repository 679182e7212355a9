// Package cli is the operator CLI of the gateway binary (`gateway sandboxes
// ls`, `threads rm`, `prune`, `version`): a client of any gateway's
// /admin/v1 API with an admin credential. Its thread commands (`templates`,
// `threads create`, `exec`, `shell`, `checkpoint`, `fork`, `freeze`) call
// /api/templates and the /threads routes instead, as the credential's own
// user. commands.go has the one table of commands. Conventions
// follow kubectl and docker: exit 0 on success, 1 on an error, 2 on a usage
// error; tables for people, -o json for scripts; no color, so no TTY
// question.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Env is what a command sees of its process.
type Env struct {
	Args   []string // after the binary's name: "sandboxes", "ls", ...
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// StdinTTY says whether Stdin is a terminal (threads rm asks there).
	StdinTTY bool
	// Version is the binary's build.
	Version Version
	// TermSize is the controlling terminal's columns and rows (shell sends
	// them); nil when stdin is not a terminal.
	TermSize func() (cols, rows int, ok bool)
}

// usageError is a bad command line: exit 2, with the command's usage.
type usageError struct {
	msg string
	// hint is the command whose usage helps ("gateway sandboxes"); empty:
	// the one the arguments name.
	hint string
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// Main runs one command and returns its exit code.
func Main(ctx context.Context, env Env) int {
	err := dispatch(ctx, env)
	var ue *usageError
	var status exitStatus
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &status):
		return int(status) // exec's command's own code, its output already shown
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		hint := ue.hint
		if hint == "" {
			hint = "gateway " + commandPath(env.Args)
		}
		fmt.Fprintf(env.Stderr, "gateway: %s\nRun '%s -h' for usage.\n", ue.msg, hint)
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "gateway: %s\n", err)
		return ExitError
	}
}

// commandPath is the command words of args ("sandboxes ls").
func commandPath(args []string) string {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || len(words) == 2 {
			break
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

const topUsage = `Operator commands (talk to a gateway with an admin credential):
  gateway sandboxes ls [--user U] [--thread T] [--state active|warm|frozen] [--backend B]
  gateway sandboxes inspect ID...
  gateway sandboxes destroy ID...
  gateway sandboxes logs [-f] [--tail N] ID
  gateway sandboxes top [--user U] [--thread T] [--state S] [--backend B] [--interval 1s]
  gateway threads rm --user U [-y] THREAD...
  gateway prune [--force]
  gateway version

Thread commands (act on the credential's own user's threads, any threads-scoped credential; an admin's
credential acts on another user's with --user U, except exec and shell):
  gateway exec THREAD -- COMMAND [ARG...]
  gateway shell THREAD
  gateway templates [ls]
  gateway threads create THREAD [--template NAME] [--env K=V]... [--memory 512m] [--meta K=V]...
  gateway checkpoint create THREAD [--label L]
  gateway checkpoint ls THREAD
  gateway checkpoint restore THREAD ID [--force]
  gateway checkpoint rm THREAD ID...
  gateway fork THREAD NEW_THREAD [--checkpoint ID]
  gateway freeze THREAD
  gateway preview create THREAD --port P [--ttl 1h]
  gateway preview ls THREAD
  gateway preview rm THREAD ID...

Run 'gateway help' for every command with one line each, 'gateway completion bash|zsh|fish'
for tab completion. Every command takes --url (default $SANDGATE_URL, else http://127.0.0.1:8080),
--token (default $SANDGATE_TOKEN), --timeout and -o table|json.
`

// wantSubcommand answers a command word without a subcommand, or with -h,
// with the usage of every command.
func wantSubcommand(env Env, args []string, want string) error {
	if len(args) >= 2 && args[1] != "-h" && args[1] != "--help" {
		return nil
	}
	fmt.Fprint(env.Stderr, topUsage)
	if len(args) < 2 {
		return usagef("%s: want a subcommand: %s", args[0], want)
	}
	return flag.ErrHelp
}

// common are the flags every command that calls a gateway takes.
type common struct {
	url, token, output string
	timeout            time.Duration
	// user is --user of the thread commands: an admin acts on that user's
	// thread (?user=); empty: the credential's own.
	user string
}

// userQuery is ?user= for a thread route, nil without --user.
func (c common) userQuery() url.Values {
	if c.user == "" {
		return nil
	}
	return url.Values{"user": {c.user}}
}

// cmdFlags is a command's flag set and its usage line.
type cmdFlags struct {
	*flag.FlagSet
	usage  string
	stderr io.Writer
}

// newFlags is a command's flag set with the common flags bound. Errors are
// printed once, by Main, with a hint instead of the whole usage.
func newFlags(env Env, name, usage string, c *common) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	def := env.Getenv("SANDGATE_URL")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	fs.StringVar(&c.url, "url", def, "gateway URL ($SANDGATE_URL)")
	fs.StringVar(&c.token, "token", env.Getenv("SANDGATE_TOKEN"), "admin credential: API key or JWT ($SANDGATE_TOKEN)")
	fs.StringVar(&c.output, "o", "table", "output format: table | json")
	fs.StringVar(&c.output, "output", "table", "output format: table | json")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on each request (logs -f: on connecting)")
	return &cmdFlags{FlagSet: fs, usage: usage, stderr: env.Stderr}
}

// newThreadFlags is newFlags for a command on a thread: any credential of
// the thread's user will do, not only an admin's.
func newThreadFlags(env Env, name, usage string, c *common) *cmdFlags {
	fs := newFlags(env, name, usage, c)
	fs.Lookup("token").Usage = "a credential of the thread's user, or an admin's with --user: API key or JWT ($SANDGATE_TOKEN)"
	return fs
}

// newUserThreadFlags is newThreadFlags for the commands on a thread's
// control routes, which take --user: an admin names whose thread.
func newUserThreadFlags(env Env, name, usage string, c *common) *cmdFlags {
	fs := newThreadFlags(env, name, usage, c)
	fs.StringVar(&c.user, "user", "", "act on this user's thread (for admins; default: the credential's own user)")
	return fs
}

// printUsage answers -h.
func (f *cmdFlags) printUsage() {
	fmt.Fprintf(f.stderr, "Usage: gateway %s\n\nFlags:\n", f.usage)
	f.SetOutput(f.stderr)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// parse parses flags and positional arguments in any order (kubectl's
// `inspect ID -o json`), then checks the common flags.
func parse(fs *cmdFlags, args []string, c *common) ([]string, error) {
	var pos []string
	for {
		if len(args) > 0 && args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.printUsage()
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" { // Parse ate the "--"
			pos = append(pos, rest...)
			break
		}
		args = rest
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if c.output != "table" && c.output != "json" {
		return nil, usagef("-o %q: want table or json", c.output)
	}
	if c.timeout <= 0 {
		return nil, usagef("--timeout must be positive")
	}
	return pos, nil
}
