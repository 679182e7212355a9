package state

import (
	"crypto/sha256"
	"encoding/hex"
)

// CapabilityLen is the length of a capability: 32 bytes in unpadded base64url.
const CapabilityLen = 43

// CapabilitySum is the index key of a capability.
type CapabilitySum [sha256.Size]byte

// SumCapability hashes a capability; no allocation for one of the valid
// length (the bytes are copied to the stack).
func SumCapability(capability string) CapabilitySum {
	var buf [CapabilityLen]byte
	if len(capability) > len(buf) {
		return sha256.Sum256([]byte(capability))
	}
	n := copy(buf[:], capability)
	return sha256.Sum256(buf[:n])
}

// Hex is the sum in the form the index keys use.
func (s CapabilitySum) Hex() string { return hex.EncodeToString(s[:]) }

// ValidCapability checks the form of a capability before any look-up: the
// exact length, and only base64url characters.
func ValidCapability(s string) bool {
	if len(s) != CapabilityLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
