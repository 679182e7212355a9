package pool

import (
	"errors"
	"fmt"
	"time"
)

// Errors callers map to statuses (router.statusOf); each wraps the cause.
var (
	// ErrNotFound: no sandbox for that thread or id (404).
	ErrNotFound = errors.New("sandbox not found")
	// ErrBadPreview: a preview link request with a bad port or ttl.
	ErrBadPreview = errors.New("bad preview link request")
	// ErrIdentityConflict: the record at the caller's sandbox id belongs to
	// another user or thread; it is never served (409).
	ErrIdentityConflict = errors.New("sandbox record belongs to another user or thread")
	// ErrProvisioning: the sandbox is still being created after the request's
	// wait budget, or another replica holds its lock (503 + Retry-After).
	ErrProvisioning = errors.New("sandbox is still being provisioned")
	// ErrCapacity: hard cap reached and nothing warm to evict (503 + Retry-After).
	ErrCapacity = errors.New("sandbox capacity reached")
	// ErrState: Redis cannot be reached (503 + Retry-After).
	ErrState = errors.New("sandbox state store unavailable")
	// ErrStorage: the thread's data directory cannot be created or written
	// (disk full, permissions) — the gateway's fault, not the sandbox's (507).
	ErrStorage = errors.New("thread data directory unavailable")
	// ErrCreate: the backend failed to start the sandbox (502).
	ErrCreate = errors.New("sandbox failed to start")
	// ErrRateLimited: the user had too many sandboxes created lately
	// (429 + Retry-After); always a *RateLimitError.
	ErrRateLimited = errors.New("sandbox create rate exceeded")
	// ErrBusy: the sandbox runs a command or serves a request, so it is
	// neither frozen nor restored under it (409).
	ErrBusy = errors.New("sandbox is busy")
	// ErrUserQuota: the user is at a per-user limit or, under a full hard
	// cap, at its fair share (429 + Retry-After); always a *QuotaError.
	ErrUserQuota = errors.New("per-user sandbox limit reached")
)

// RateLimitError is a create refused by the CreateLimiter.
type RateLimitError struct {
	User       string
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%v for user %s; retry after %s", ErrRateLimited, e.User, e.RetryAfter)
}

func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// Limits a QuotaError names.
const (
	LimitSandboxesPerUser = "max_sandboxes_per_user"
	LimitCreatesPerUser   = "max_creates_per_user"
	LimitFairShare        = "fair_share"
)

// QuotaError is a create refused by a fleet-wide per-user limit.
type QuotaError struct {
	User  string
	Limit string // LimitSandboxesPerUser, LimitCreatesPerUser or LimitFairShare
	// Max is the limit's value: the configured maximum, or the fair share
	// (max_sandboxes / users holding sandboxes).
	Max        int
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v: user %s at %s %d; retry after %s", ErrUserQuota, e.User, e.Limit, e.Max, e.RetryAfter)
}

func (e *QuotaError) Unwrap() error { return ErrUserQuota }
