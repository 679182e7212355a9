// Command gateway runs the Sandgate gateway (`gateway serve`, the default) or
// one sandbox server with tracing (`gateway sandbox`, started by the process
// backend when cmd/sandgate-sandbox is not beside it or tracing is on; the
// sandbox images run cmd/sandgate-sandbox).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/sandbox"
)

func main() {
	err := sandbox.MainOrJailed(run)
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		var usage *config.UsageError
		if errors.As(err, &usage) {
			fmt.Fprintln(os.Stderr, config.UsageHint)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// secondSignal is done once SIGINT or SIGTERM has come twice: the first
// ends main's ctx and starts the drain, the second cuts its delay short.
func secondSignal() (context.Context, context.CancelFunc) {
	hurry, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigs)
		for range 2 {
			select {
			case <-sigs:
			case <-hurry.Done():
				return
			}
		}
		cancel()
	}()
	return hurry, cancel
}
