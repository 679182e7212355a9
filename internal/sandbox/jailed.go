package sandbox

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Jailed is the process backend's isolated sandbox (jail.InitCommand): it
// sets the jail up around this process, then serves in it, so a sandbox
// costs one program start. A start-up probe ends after the set-up.
func Jailed(ctx context.Context) error {
	server, err := jail.Setup()
	if err != nil || len(server) == 0 {
		return err
	}
	if server[0] != sandboxspec.ServerCommand {
		return fmt.Errorf("%s: server command %q is not sandbox", jail.InitCommand, server[0])
	}
	return Main(ctx, server[1:])
}
