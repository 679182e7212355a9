//go:build linux

package jail

import (
	"fmt"
	"unsafe"

	"kernel.org/pub/linux/libs/security/libcap/psx"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/jail/earlydrop"
)

// dropPrivileges leaves the process with no capability and no way to gain
// one: ambient set cleared, bounding set emptied, securebits locked and
// no_new_privs set (earlydrop: the sandbox init did that at start-up),
// then effective, permitted and inheritable sets zeroed. Capabilities
// belong to a thread, not the process, so capset runs on all of the Go
// runtime's threads (psx, see earlydrop), after earlydrop.Drop, which needs
// CAP_SETPCAP.
func dropPrivileges() error {
	if err := earlydrop.Drop(); err != nil {
		return err
	}
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{}
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(data)), 0); e != 0 {
		return fmt.Errorf("capset to none: %w", e)
	}
	return nil
}
