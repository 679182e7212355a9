//go:build !linux

package sandbox

import (
	"context"

	"github.com/sandgate/sandgate/internal/proctree"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// cgroupSource: off Linux there is none.
type cgroupSource struct{}

func freezeSandbox(context.Context) (proctree.Set, error) { return nil, errNoAdmin }

// thawSandbox has nothing to continue: freezeSandbox never stopped anything.
func thawSandbox(proctree.Set) error { return nil }

func (s *Server) measure() (sandboxspec.Stats, error) { return sandboxspec.Stats{}, errNoAdmin }
