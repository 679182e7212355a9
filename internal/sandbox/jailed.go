package sandbox

import (
	"context"
	"fmt"
	"os"
	ossignal "os/signal"
	"syscall"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Jailed is the process backend's isolated sandbox (jail.InitCommand): it
// sets the jail up around this process, then serves in it, so a sandbox
// costs one program start. A start-up probe ends after the set-up.
//
// It watches SIGINT and SIGTERM (ending the server's context) only once the
// jail is built, so MainOrJailed runs it before watching them: the watch
// starts a thread, which each of the set-up's all-threads syscalls then
// signals too (0.3 ms of a sandbox start). Until then either signal ends
// the process, the Go runtime's default.
func Jailed() error {
	server, err := jail.Setup()
	if err != nil || len(server) == 0 {
		return err
	}
	if server[0] != sandboxspec.ServerCommand {
		return fmt.Errorf("%s: server command %q is not sandbox", jail.InitCommand, server[0])
	}
	ctx, stop := ossignal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Main(ctx, server[1:])
}

// MainOrJailed is the body of a main whose binary can be an isolated
// sandbox: started as jail.InitCommand it is Jailed, which watches signals
// itself once its jail is built; otherwise run gets the other arguments
// and a context that SIGINT and SIGTERM end.
func MainOrJailed(run func(ctx context.Context, args []string) error) error {
	if len(os.Args) > 1 && os.Args[1] == jail.InitCommand {
		return Jailed()
	}
	ctx, stop := ossignal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:])
}
