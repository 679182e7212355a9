package earlydrop

import "golang.org/x/sys/unix"

// entry (entry_linux_amd64.s) does drop's work before the Go runtime starts
// where the build makes it the program's entry point, as scripts/build.sh
// does: go build -ldflags "-E $EntrySymbol". There the process has one
// thread, so each step is one prctl, not a signal round trip to every
// thread of the runtime (2 ms of a sandbox start, most of its package
// init). A build without the flag drops at package init instead (init).
func entry()

// entryCommand is argv[1] of a sandbox init as entry compares it, the
// terminating NUL included. A constant's value: the linker lays it out, so
// it is there before the runtime starts.
var entryCommand = Command + "\x00"

// The prctl options entry uses (go_asm.h exports them as const_*).
const (
	prCapAmbient         = unix.PR_CAP_AMBIENT
	prCapAmbientClearAll = unix.PR_CAP_AMBIENT_CLEAR_ALL
	prCapbsetRead        = unix.PR_CAPBSET_READ
	prCapbsetDrop        = unix.PR_CAPBSET_DROP
	prSetSecurebits      = unix.PR_SET_SECUREBITS
	prSetNoNewPrivs      = unix.PR_SET_NO_NEW_PRIVS
)
