package jail

import (
	"fmt"
	"os"

	"github.com/sandgate/sandgate/internal/jail/seccompfilter"
)

// The policy is compiled by the gateway (package seccompfilter): the
// tests of this package check it under the names it had here.
var (
	deniedSyscalls = seccompfilter.DeniedSyscalls
	seccompPolicy  = seccompfilter.Policy
)

// testSeccomp is the program the gateway hands to a sandbox.
func testSeccomp() []byte {
	p, err := seccompfilter.Program()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return p
}
