package router

import (
	"context"
	"strings"

	"github.com/sandgate/sandgate/internal/api"
)

// threadData measures a thread's data for the control plane; nil when the
// backend keeps it elsewhere or it cannot be measured now (logged: the
// sandbox view is still served).
func (rt *Router) threadData(ctx context.Context, user, thread string) *api.ThreadData {
	if rt.meter == nil {
		return nil
	}
	u, err := rt.meter.Measure(ctx, user, thread)
	if err != nil {
		rt.log.WarnContext(ctx, "measure thread data", "user", user, "thread", thread, "err", err)
		return nil
	}
	q := rt.meter.Quota()
	return &api.ThreadData{Bytes: u.Bytes, Quota: q, OverQuota: u.Over(q), Approximate: u.Approximate, MeasuredAt: u.MeasuredAt.UTC()}
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
