package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/sandgate/sandgate/internal/cli"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtrace"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// version and revision are stamped by make build and the image build
// (-ldflags "-X main.version=... -X main.revision=..."); empty: read from
// the Go build info (cli.BuildVersion).
var version, revision string

// exitCode ends the process with a CLI command's code (already reported).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

func run(ctx context.Context, args []string) error {
	// A word that names nothing goes to the CLI too, which suggests the
	// command it is closest to.
	known := len(args) > 0 && (args[0] == "serve" || args[0] == sandboxspec.ServerCommand)
	if len(args) > 0 && (cli.IsCommand(args[0]) || !known && !strings.HasPrefix(args[0], "-")) {
		env := cli.Env{Args: args, Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
			StdinTTY: isTerminal(os.Stdin), Version: cli.BuildVersion(version, revision)}
		if env.StdinTTY {
			env.TermSize = func() (int, int, bool) {
				cols, rows, err := term.GetSize(int(os.Stdin.Fd()))
				return cols, rows, err == nil
			}
		}
		code := cli.Main(ctx, env)
		if code != 0 {
			return exitCode(code)
		}
		return nil
	}
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help": // the commands first, then serve's flags
			cli.PrintCommands(os.Stderr)
			fmt.Fprintf(os.Stderr, "\nserve's flags:\n\n")
		case sandboxspec.ServerCommand:
			return sandboxtrace.Main(ctx, args[1:])
		case "serve":
			args = args[1:]
		}
	}
	return serve(ctx, args)
}

func serve(ctx context.Context, args []string) error {
	cfg, warnings, err := config.Load(args, os.LookupEnv, os.Stderr)
	if config.IsHelp(err) {
		return nil
	}
	if err != nil {
		return err
	}
	build := cli.BuildVersion(version, revision)
	cfg.Version, cfg.Revision = build.Version, build.Revision
	log := telemetry.NewLogger(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	gateway.TuneGC() // unless GOGC is set
	for _, w := range warnings {
		log.Warn("config: " + w)
	}
	g, err := gateway.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	hurry, stopHurry := secondSignal()
	defer stopHurry()
	return g.Run(ctx, hurry.Done())
}

// isTerminal: a TTY (not /dev/null, which is a character device too).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
