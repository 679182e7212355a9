// Package lease keeps the fleet-wide sandbox state in Redis: one record per
// sandbox, the active and warm indexes, the capacity reservations and the
// per-sandbox provisioning lock. Every conditional write is one Lua script,
// so replicas never interleave a read and a write.
package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// MaxThreadLen bounds thread ids (and user names used in paths).
const MaxThreadLen = 128

// ErrBadThread is returned for a thread id outside [A-Za-z0-9._:-]{1,128}.
var ErrBadThread = errors.New("thread id must be 1-128 characters of [A-Za-z0-9._:-], not . or ..")

// ErrBadUser is returned for a user name that cannot be a path component.
var ErrBadUser = errors.New("user name must be 1-128 characters of [A-Za-z0-9._:@-], not . or ..")

// SandboxID is DeerFlow's deterministic id: hex(sha256(user:thread))[:16].
func SandboxID(user, thread string) string {
	var buf [256 + 1 + 2]byte
	b := append(append(append(buf[:0], user...), ':'), thread...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ValidThread checks a thread id without allocating; it runs before any I/O.
func ValidThread(thread string) error {
	if !validName(thread, false) {
		return ErrBadThread
	}
	return nil
}

// ValidUser checks that a principal name can be used as a directory name.
func ValidUser(user string) error {
	if !validName(user, true) {
		return ErrBadUser
	}
	return nil
}

func validName(s string, allowAt bool) bool {
	if len(s) == 0 || len(s) > MaxThreadLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		case c == '@' && allowAt:
		default:
			return false
		}
	}
	return true
}

// ValidSandboxID reports whether s looks like an id SandboxID produced.
func ValidSandboxID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
