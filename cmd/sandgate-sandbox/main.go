// Command sandgate-sandbox is the sandbox server alone: `sandgate-sandbox
// sandbox` is `gateway sandbox` without tracing, and `sandgate-sandbox
// sandbox-init` is the process backend's isolated sandbox, in a binary
// without the gateway's backends, clients and OpenTelemetry (main_test.go
// keeps them out). A Go program initialises every package it links before
// main, whatever the subcommand, so this one starts a sandbox sooner
// (docs/BENCHMARKS.md). The process backend uses it when it sits next to
// the gateway binary (`make build` puts both in bin/), but for plain
// sandboxes while tracing is on, and the gateway binary itself otherwise.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

func main() {
	err := sandbox.MainOrJailed(run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandgate-sandbox:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == sandboxspec.ServerCommand {
		return sandbox.Main(ctx, args[1:])
	}
	return fmt.Errorf("usage: sandgate-sandbox sandbox [flags] | %s (started by the process backend)", jail.InitCommand)
}
