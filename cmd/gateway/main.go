// Command gateway runs the Sandgate gateway (`gateway serve`, the default) or
// one sandbox server (`gateway sandbox`, started by the process backend and
// used as the entrypoint of the sandbox image).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
