//go:build !linux

package jail

import (
	"errors"
	"os/exec"
)

// errUnsupported: namespaces, Landlock and seccomp are Linux's.
var errUnsupported = errors.New("process isolation needs Linux (set process_isolation: none)")

// Own does nothing off Linux, where no sandbox has ids of its own.
func Own(string, int, int) error { return nil }

// Start fails off Linux.
func (c *Command) Start() (*exec.Cmd, error) { return nil, errUnsupported }

// Setup fails off Linux.
func Setup() ([]string, error) { return nil, errUnsupported }
