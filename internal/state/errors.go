package state

import "errors"

// ErrLocked is returned when the lock stays held by another replica for the
// whole wait.
var ErrLocked = errors.New("sandbox is locked by another replica")

// ErrNoSession is an unknown, expired or revoked session.
var ErrNoSession = errors.New("no such session")

// ErrIdentity: a record's user and thread are not the caller's.
var ErrIdentity = errors.New("sandbox record belongs to another user or thread")
