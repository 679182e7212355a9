package router

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/usage"
)

// Meter measures the thread data a backend keeps on the gateway host
// (internal/usage.Meter).
type Meter interface {
	// Measure is the thread's usage, from a cache fresh for a few seconds
	// or from a walk shared with concurrent callers.
	Measure(ctx context.Context, user, thread string) (usage.Usage, error)
	// Cached never walks: the last measurement, if any (a missing or stale
	// one is refreshed in the background).
	Cached(user, thread string) (usage.Usage, bool)
	// Quota is thread_data_quota in bytes; 0 = none.
	Quota() int64
	// Remove deletes the thread's data (threads rm); false: there was none.
	Remove(ctx context.Context, user, thread string) (bool, error)
}

// dataView is the "data" of GET /threads/{thread}/sandbox.
type dataView struct {
	Bytes       int64     `json:"bytes"`
	Quota       int64     `json:"quota,omitempty"`
	OverQuota   bool      `json:"over_quota"`
	Approximate bool      `json:"approximate"`
	MeasuredAt  time.Time `json:"measured_at"`
}

// threadData measures a thread's data for the control plane; nil when the
// backend keeps it elsewhere or it cannot be measured now (logged: the
// sandbox view is still served).
func (rt *Router) threadData(ctx context.Context, user, thread string) *dataView {
	if rt.meter == nil {
		return nil
	}
	u, err := rt.meter.Measure(ctx, user, thread)
	if err != nil {
		rt.log.WarnContext(ctx, "measure thread data", "user", user, "thread", thread, "err", err)
		return nil
	}
	q := rt.meter.Quota()
	return &dataView{Bytes: u.Bytes, Quota: q, OverQuota: u.Over(q), Approximate: u.Approximate, MeasuredAt: u.MeasuredAt.UTC()}
}

// quotaError refuses a file write to a thread measured over its quota (507).
type quotaError struct {
	usage usage.Usage
	quota int64
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("the thread's data (%d bytes, measured at %s) is over its quota of %d bytes (thread_data_quota): "+
		"file writes through the API are refused until files are deleted", e.usage.Bytes,
		e.usage.MeasuredAt.UTC().Format(time.RFC3339), e.quota)
}

// checkQuota refuses the sandbox API's file-writing routes for a thread
// whose last measurement is over the quota. It never walks the disk: an
// unmeasured thread gets through and is measured in the background. Other
// routes (a shell command writing a file included) are not looked at, so
// the quota is a soft limit.
func (rt *Router) checkQuota(route Sandbox, path string) error {
	if rt.meter == nil || !writesFile(path) {
		return nil
	}
	q := rt.meter.Quota()
	if q == 0 {
		return nil
	}
	id := route.Identity()
	if u, ok := rt.meter.Cached(id.User, id.Thread); ok && u.Over(q) {
		return &quotaError{usage: u, quota: q}
	}
	return nil
}

// writesFile: a sandbox API route that writes a file from the request.
func writesFile(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/file/")
	if !ok {
		return false
	}
	switch strings.TrimSuffix(rest, "/") {
	case "write", "replace", "upload", "str_replace_editor":
		return true
	}
	return false
}
