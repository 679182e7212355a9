// Package earlydrop gives up, while the Go runtime has its fewest threads,
// the privileges the process backend's sandbox init (jail.InitCommand)
// never needs: its capability bounding set, its ambient capabilities, the
// freedom to gain any (securebits locked, no_new_privs). Each is a
// per-thread attribute, set on every thread by a signal round trip to each
// (syscall.AllThreadsSyscall), and the bounding set goes one capability at
// a time: 44 round trips, which cost a sandbox start several milliseconds
// once the init has built its root with twice the threads. Done here, at
// package initialisation, it is the first thing the sandbox init does, and
// what it keeps (its effective capabilities) still builds the root.
// package jail imports it for the init, and drops what is left (Drop, then
// its capabilities) when it locks down. A binary linked to start at entry
// (EntrySymbol, linux/amd64: scripts/build.sh) does it all before the
// runtime starts, with one thread: no round trip at all.
package earlydrop

// Command is the sandbox init's subcommand (jail.InitCommand).
const Command = "sandbox-init"

// EntrySymbol is the entry point that drops before the Go runtime starts
// (linux/amd64): a binary linked with -ldflags "-E EntrySymbol", as
// scripts/build.sh links both of Sandgate's, starts a sandbox sooner.
const EntrySymbol = "github.com/sandgate/sandgate/internal/jail/earlydrop.entry"
