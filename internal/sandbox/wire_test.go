package sandbox

import (
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

func TestWireConstantsMatchTheGateway(t *testing.T) {
	if secretHeader != backend.SecretHeader || virtualWorkspace != backend.VirtualWorkspace || egressPort != backend.EgressPort {
		t.Fatalf("sandbox (%q, %q, %d) and backend (%q, %q, %d) disagree", secretHeader, virtualWorkspace, egressPort,
			backend.SecretHeader, backend.VirtualWorkspace, backend.EgressPort)
	}
}
