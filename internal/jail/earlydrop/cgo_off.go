//go:build linux && !cgo

package earlydrop

// withCgo: see cgo_on.go.
const withCgo = false
