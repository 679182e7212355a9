package router

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/usage"
)

// fakeMeter answers Cached from a fixed measurement and counts look-ups.
type fakeMeter struct {
	u      usage.Usage
	ok     bool
	quota  int64
	cached int
}

func (f *fakeMeter) Measure(context.Context, string, string) (usage.Usage, error) { return f.u, nil }
func (f *fakeMeter) Cached(string, string) (usage.Usage, bool)                    { f.cached++; return f.u, f.ok }
func (f *fakeMeter) Quota() int64                                                 { return f.quota }
func (f *fakeMeter) Remove(context.Context, string, string) (bool, error)         { return false, nil }

func TestCheckQuota(t *testing.T) {
	t.Parallel()
	route := &pool.Route{User: "alice", Thread: "t"}
	over := usage.Usage{Bytes: 2048, MeasuredAt: time.Now()}
	under := usage.Usage{Bytes: 512, MeasuredAt: time.Now()}
	for _, tc := range []struct {
		name    string
		meter   *fakeMeter // nil: the backend keeps data elsewhere
		path    string
		refused bool
		lookups int
	}{
		{"no meter", nil, "/v1/file/write", false, 0},
		{"no quota", &fakeMeter{u: over, ok: true}, "/v1/file/write", false, 0},
		{"under", &fakeMeter{u: under, ok: true, quota: 1024}, "/v1/file/write", false, 1},
		{"unmeasured", &fakeMeter{quota: 1024}, "/v1/file/upload", false, 1},
		{"over write", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/write", true, 1},
		{"over upload", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/upload", true, 1},
		{"over replace", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/replace", true, 1},
		{"over editor", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/str_replace_editor", true, 1},
		{"over trailing slash", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/write/", true, 1},
		{"over read", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/read", false, 0},
		{"over shell", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/shell/exec", false, 0},
		{"over lookalike", &fakeMeter{u: over, ok: true, quota: 1024}, "/v1/file/writer", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := &Router{}
			if tc.meter != nil {
				rt.meter = tc.meter
			}
			err := rt.checkQuota(route, tc.path)
			if (err != nil) != tc.refused {
				t.Fatalf("checkQuota(%s) = %v, refused want %v", tc.path, err, tc.refused)
			}
			if tc.meter != nil && tc.meter.cached != tc.lookups {
				t.Fatalf("%d cache look-ups, want %d", tc.meter.cached, tc.lookups)
			}
			if !tc.refused {
				return
			}
			e := statusOf(err)
			if e.status != http.StatusInsufficientStorage || e.code != "quota_exceeded" ||
				!strings.Contains(e.message, "quota of 1024 bytes") || !strings.Contains(e.message, "2048 bytes") {
				t.Fatalf("refusal %d %s %q: want 507 quota_exceeded naming the quota", e.status, e.code, e.message)
			}
		})
	}
}

// BenchmarkCheckQuota is the data plane's cost of a quota on a file write
// with a measured thread: a map look-up, no walk, no allocation.
func BenchmarkCheckQuota(b *testing.B) {
	m := usage.New(usage.Config{DataDir: b.TempDir(), Quota: 1 << 30, TTL: time.Hour})
	if _, err := m.Measure(context.Background(), "alice", "t"); err != nil {
		b.Fatal(err)
	}
	rt := &Router{meter: m}
	route := &pool.Route{User: "alice", Thread: "t"}
	b.ReportAllocs()
	for b.Loop() {
		if err := rt.checkQuota(route, "/v1/file/write"); err != nil {
			b.Fatal(err)
		}
	}
}
