//go:build linux && cgo

package earlydrop

// withCgo: the binary links cgo, where psx reaches the other threads
// through libpsx; that is not usable while packages initialise (the drop
// hung the sandbox init of a plain `go run ./cmd/gateway`), so the drop
// waits for Drop at lock-down.
const withCgo = true
