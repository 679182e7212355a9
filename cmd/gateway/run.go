package main

import (
	"context"

	"github.com/sandgate/sandgate/internal/sandbox"
)

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "sandbox":
			return sandbox.Main(ctx, args[1:])
		case "serve":
			return serve(ctx, args[1:])
		}
	}
	return serve(ctx, args)
}

// serve is replaced by the gateway server.
func serve(ctx context.Context, args []string) error {
	<-ctx.Done()
	return nil
}
