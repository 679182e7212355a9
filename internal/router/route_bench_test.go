package router

import (
	"net/http"
	"testing"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// routeCases are the data-plane routes as a request reaches them; port
// is set for /threads/{thread}/ports/{port}/..., whose port is validated
// and cut off too.
var routeCases = []struct {
	name, path, param, prefix, want string
	valid                           func(string) bool
	port                            bool
}{
	{name: "thread", path: "/threads/thread-1/v1/shell/exec", param: "thread", prefix: "/threads/", want: "/v1/shell/exec",
		valid: func(s string) bool { return identity.ValidThread(s) == nil }},
	{name: "sandbox", path: "/sandboxes/0123456789abcdef/v1/file/read", param: "id", prefix: "/sandboxes/", want: "/v1/file/read",
		valid: identity.ValidSandboxID},
	{name: "thread port", path: "/threads/thread-1/ports/3000/src/main.js", param: "thread", prefix: "/threads/", want: "/src/main.js",
		valid: func(s string) bool { return identity.ValidThread(s) == nil }, port: true},
}

// routeMatcher parses a path as the gateway does per request: echo's
// router matches the route and extracts the id, the id is validated and
// the upstream path is cut off the request path. It returns "" when the
// id is refused.
func routeMatcher(tb testing.TB, param, prefix string, valid func(string) bool, port bool) func(path string) string {
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}})
	c := rt.echo.AcquireContext()
	tb.Cleanup(func() { rt.echo.ReleaseContext(c) })
	r := rt.echo.Router()
	return func(path string) string {
		r.Find(http.MethodPost, path, c)
		id := c.Param(param)
		if !valid(id) {
			return ""
		}
		n := len(prefix) + len(id)
		if port {
			if !sandboxspec.ValidPort(c.Param("port")) {
				return ""
			}
			n = portPrefixLen(id, c.Param("port"))
		}
		p, _ := upstreamPath(path, "", n)
		return p
	}
}

// The whole route parse, echo's match included, must not allocate: it
// runs on every proxied request.
func TestRouteMatchDoesNotAllocate(t *testing.T) {
	for _, rc := range routeCases {
		match := routeMatcher(t, rc.param, rc.prefix, rc.valid, rc.port)
		if got := match(rc.path); got != rc.want {
			t.Fatalf("%s: upstream path %q, want %q", rc.name, got, rc.want)
		}
		if allocs := testing.AllocsPerRun(1000, func() { match(rc.path) }); allocs != 0 {
			t.Errorf("%s: route parse allocates %.1f times", rc.name, allocs)
		}
	}
}

// BenchmarkRouteMatch is the route parse of one proxied request: echo's
// route match, id validation and upstream path.
func BenchmarkRouteMatch(b *testing.B) {
	for _, rc := range routeCases {
		b.Run(rc.name, func(b *testing.B) {
			match := routeMatcher(b, rc.param, rc.prefix, rc.valid, rc.port)
			if got := match(rc.path); got != rc.want {
				b.Fatalf("upstream path %q, want %q", got, rc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				match(rc.path)
			}
		})
	}
}
