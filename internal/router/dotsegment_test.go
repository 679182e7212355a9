package router

import (
	"net/url"
	"testing"
)

func TestHasDotSegment(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw string // as sent on the request line
		dot bool
	}{
		{"/threads/x/v1/shell/exec", false},
		{"/threads/x/v1/file/app.js", false},
		{"/threads/x/v1/a..b/...", false},
		{"/threads/x/v1/.hidden", false},
		{"/threads/x/v1/file%20name", false},
		{"/threads/x/v1/../../sandboxes/0123456789abcdef/v1/shell/exec", true},
		{"/threads/x/v1/./shell/exec", true},
		{"/threads/x/v1/..", true},
		{"/threads/x/v1/%2e%2e/%2e%2e/sandboxes/0123456789abcdef/v1/x", true},
		{"/threads/x/v1/%2E%2e/%2e%2E/sandboxes/0123456789abcdef/v1/x", true},
		{"/threads/x/v1/.%2e/x", true},
		{"/threads/x/v1/..%2f..%2fsandboxes%2f0123456789abcdef/v1/x", true},
		{"/threads/x/v1/%2e%2e%2f%2e%2e%2fsandboxes/x", true},
		{"/threads/x/v1/..%5c..%5csandboxes/x", true},
		{"/threads/x/v1/..\\..\\sandboxes/x", true},
		{"/threads/x/v1/%252e%252e/%252e%252e/sandboxes/x", true},
		{"/threads/x/v1/%25252e%25252e/x", true},
		{"/threads/x/v1/%2525252e%2525252e/x", true},
		{"/threads/x/v1/..%252f..%252fsandboxes/x", true},
		{"/threads/x/v1/a%252541", false},        // two layers, no dots
		{"/threads/x/v1/a%25252525252541", true}, // more layers than are looked through: refused
		{"/threads/x/v1/50%25off", true},         // a % that is no escape: a lenient proxy might decode it
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.raw, err)
		}
		if got := hasDotSegment(u.Path); got != c.dot {
			t.Errorf("%s (decoded %q): dot segment = %v, want %v", c.raw, u.Path, got, c.dot)
		}
	}
}

func TestHasDotSegmentDoesNotAllocate(t *testing.T) {
	path := "/threads/thread-1/v1/file/read/static/app.min.js"
	if n := testing.AllocsPerRun(100, func() { hasDotSegment(path) }); n != 0 {
		t.Errorf("hasDotSegment allocates %.0f times on a plain path", n)
	}
}
