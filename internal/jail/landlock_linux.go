//go:build linux

package jail

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// shellDevices are the device files a shell writes to, and ptyDirs the
// directory of the pty devices /dev/ptmx creates. Both get ioctl rights too
// (Landlock ABI 5 restricts ioctl on devices), or a pty could not be resized
// or put into raw mode.
var (
	shellDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx"}
	ptyDirs      = []string{"/dev/pts"}
)

// landlockConfig handles every filesystem right go-landlock knows and both
// IPC scopes (abstract unix sockets and signals to processes outside the
// domain), downgraded to what the kernel supports. Network rights are not
// handled: the sandbox has a network namespace of its own, and programs in
// it may listen on and dial its loopback.
var landlockConfig = landlock.Config{
	HandledAccessFS: landlock.V11.HandledAccessFS,
	Scoped:          landlock.V11.Scoped,
}.BestEffort()

// restrictFilesystem lets the process and everything it starts read and
// execute anything under "/", and write only under writable and the shell
// devices. A path that does not exist grants nothing rather than failing,
// as the sandbox's root may lack an optional directory such as /dev/shm.
// Without Landlock in the kernel it does nothing and returns nil
// (landlockABI then says 0); an error means Landlock is there but failed.
// It sets no_new_privs on all threads.
//
// go-landlock restricts each thread with a landlock_restrict_self call of its
// own, and each call makes a domain: the threads end up in sibling domains.
// With signals scoped, a thread may signal only processes of its own domain
// (or nested in it), that is those forked by the same thread; the sandbox
// server forks and signals its commands from one thread for that reason
// (sandbox's procthread.go).
func restrictFilesystem(writable []string) error {
	err := landlockConfig.Restrict(
		landlock.RODirs("/"),
		// Refer lets files move between the writable directories (a
		// rename instead of mv's copy and delete).
		landlock.RWDirs(writable...).WithRefer().IgnoreIfMissing(),
		landlock.RWFiles(shellDevices...).WithIoctlDev().IgnoreIfMissing(),
		landlock.RWDirs(ptyDirs...).WithIoctlDev().IgnoreIfMissing(),
	)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// landlockABI is the Landlock ABI version the kernel offers, 0 without
// Landlock.
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}
