// Package identity holds the rules that name a sandbox: which user names and
// thread ids are valid, and the id derived from them. It is a leaf: auth,
// lease and the backends import it, so none of them needs Redis code for it.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// MaxThreadLen bounds thread ids (and user names used in paths).
const MaxThreadLen = 128

// ErrBadThread is returned for a thread id outside [A-Za-z0-9._:-]{1,128}.
var ErrBadThread = errors.New("thread id must be 1-128 characters of [A-Za-z0-9._:-], not . or ..")

// ErrBadUser is returned for a user name that cannot be a path component or
// would make the id formula ambiguous.
var ErrBadUser = errors.New("user name must be 1-128 characters of [A-Za-z0-9._@-] (no ':'), not . or ..")

// SandboxID is DeerFlow's deterministic id: hex(sha256(user:thread))[:16].
// A user name never contains ':' (ValidUser), so the first ':' ends the user
// and no two (user, thread) pairs hash the same input: "alice:proj" + "1"
// cannot stand in for "alice" + "proj:1".
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

// validName: threads allow ':' (DeerFlow's ids use it); users allow '@'
// (e-mail subjects) but never ':', the separator of the id formula.
func validName(s string, user bool) bool {
	if len(s) == 0 || len(s) > MaxThreadLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-':
		case c == ':' && !user, c == '@' && user:
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
