// Package cli is the operator CLI of the gateway binary (`gateway sandboxes
// ls`, `threads rm`, `prune`, `version`): a client of any gateway's
// /admin/v1 API with an admin credential. Its thread commands (`templates`,
// `threads create`, `checkpoint`, `fork`, `freeze`) call /api/templates and
// the /threads routes instead, as the credential's own user. Conventions
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
}

// Commands are the first arguments Main handles.
var Commands = []string{"sandboxes", "threads", "prune", "templates", "checkpoint", "checkpoints", "fork", "freeze",
	"version", "--version", "-version"}

// IsCommand reports whether arg names a CLI command.
func IsCommand(arg string) bool {
	for _, c := range Commands {
		if arg == c {
			return true
		}
	}
	return false
}

// usageError is a bad command line: exit 2, with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// Main runs one command and returns its exit code.
func Main(ctx context.Context, env Env) int {
	err := dispatch(ctx, env)
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "gateway: %s\nRun 'gateway %s -h' for usage.\n", ue.msg, commandPath(env.Args))
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
  gateway sandboxes ls [--user U] [--thread T] [--state active|warm] [--backend B]
  gateway sandboxes inspect ID...
  gateway sandboxes destroy ID...
  gateway sandboxes logs [-f] [--tail N] ID
  gateway sandboxes top [--user U] [--thread T] [--state S] [--backend B] [--interval 1s]
  gateway threads rm --user U [-y] THREAD...
  gateway prune [--force]
  gateway version

Thread commands (act on the credential's own user's threads; any threads-scoped credential):
  gateway templates [ls]
  gateway threads create THREAD [--template NAME] [--env K=V]... [--memory 512m] [--meta K=V]...
  gateway checkpoint create THREAD [--label L]
  gateway checkpoint ls THREAD
  gateway checkpoint restore THREAD ID [--force]
  gateway checkpoint rm THREAD ID...
  gateway fork THREAD NEW_THREAD [--checkpoint ID]
  gateway freeze THREAD

Every command takes --url (default $SANDGATE_URL, else http://127.0.0.1:8080),
--token (default $SANDGATE_TOKEN), --timeout and -o table|json.
`

func dispatch(ctx context.Context, env Env) error {
	args := env.Args
	if len(args) == 0 {
		return usagef("no command")
	}
	switch args[0] {
	case "version", "--version", "-version":
		return runVersion(env, args[1:])
	case "prune":
		return runPrune(ctx, env, args[1:])
	case "templates":
		if len(args) > 1 && (args[1] == "ls" || args[1] == "list") {
			args = args[1:]
		}
		return runTemplates(ctx, env, args[1:])
	case "threads":
		if err := wantSubcommand(env, args, "create, rm"); err != nil {
			return err
		}
		switch args[1] {
		case "create":
			return runThreadsCreate(ctx, env, args[2:])
		case "rm", "delete":
			return runThreadsRm(ctx, env, args[2:])
		}
		return usagef("threads: unknown subcommand %q (want create, rm)", args[1])
	case "checkpoint", "checkpoints":
		if err := wantSubcommand(env, args, "create, ls, restore, rm"); err != nil {
			return err
		}
		switch args[1] {
		case "create":
			return runCheckpointCreate(ctx, env, args[2:])
		case "ls", "list":
			return runCheckpointList(ctx, env, args[2:])
		case "restore":
			return runCheckpointRestore(ctx, env, args[2:])
		case "rm", "delete":
			return runCheckpointRm(ctx, env, args[2:])
		}
		return usagef("checkpoint: unknown subcommand %q (want create, ls, restore, rm)", args[1])
	case "fork":
		return runFork(ctx, env, args[1:])
	case "freeze":
		return runFreeze(ctx, env, args[1:])
	case "sandboxes", "sandbox", "sb":
		if err := wantSubcommand(env, args, "ls, inspect, destroy, logs, top"); err != nil {
			return err
		}
		switch args[1] {
		case "ls", "list":
			return runList(ctx, env, args[2:])
		case "inspect":
			return runInspect(ctx, env, args[2:])
		case "destroy", "rm":
			return runDestroy(ctx, env, args[2:])
		case "logs":
			return runLogs(ctx, env, args[2:])
		case "top":
			return runTop(ctx, env, args[2:])
		}
		return usagef("sandboxes: unknown subcommand %q (want ls, inspect, destroy, logs, top)", args[1])
	}
	return usagef("unknown command %q", args[0])
}

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
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.printUsage()
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
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
