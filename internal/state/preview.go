package state

import "time"

// Preview is a preview link as its sandbox's list keeps it: no signature
// is stored; listing re-signs the link with the key named here.
type Preview struct {
	ID          string // 12 hex digits
	Port        int
	Expires     time.Time // whole seconds
	KeyID       uint16
	Incarnation string
}
