//go:build !linux

package sandbox

import (
	"os/exec"

	"github.com/sandgate/sandgate/internal/osthread"
)

// Only Linux's jail limits commands apart from the server.
func limitedScript(script string) string { return script }

func startLimited(cmd *exec.Cmd) error { return osthread.Start(cmd) }
