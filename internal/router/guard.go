package router

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
)

// rule is what a route asks of its caller.
type rule struct {
	scope auth.Scope // 0: any authenticated principal
	// apiKey accepts DeerFlow's X-API-Key header (the provisioner API).
	apiKey bool
}

var (
	anyone      = rule{}
	threads     = rule{scope: auth.ScopeThreads}
	provisioner = rule{scope: auth.ScopeThreads, apiKey: true}
)

// handler is a route that runs for an admitted principal.
type handler func(c echo.Context, p *auth.Principal) error

// forUser lets an admin act on another user's thread: ?user=U on a
// thread's control routes (sandbox, checkpoints, fork, freeze) runs h as U.
// Anyone else naming a user not their own is refused (403), never served
// their own thread of that name instead.
func forUser(h handler) handler {
	return func(c echo.Context, p *auth.Principal) error {
		user := c.QueryParam("user")
		if user == "" || user == p.User {
			return h(c, p)
		}
		if !p.Has(auth.ScopeAdmin) {
			return errOtherUser
		}
		if err := identity.ValidUser(user); err != nil {
			return err
		}
		return h(c, p.As(user))
	}
}

// need wraps h: authenticate, check the scope, count the request against
// the user's limit for as long as it runs.
func (rt *Router) need(ru rule, h handler) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, slot, err := rt.admit(c.Request(), ru)
		if err != nil {
			return err
		}
		defer rt.limits.end(slot)
		return h(c, p)
	}
}

// admit authenticates r and checks it against ru; on success the caller
// must end the returned slot. Nothing here allocates for a known API key or
// cached token.
func (rt *Router) admit(r *http.Request, ru rule) (*auth.Principal, *userState, error) {
	p := auth.Local()
	if rt.auth != nil {
		var err error
		if p, err = rt.auth.Authenticate(r, ru.apiKey); err != nil {
			return nil, nil, err
		}
	}
	if !p.Has(ru.scope) {
		return nil, nil, errScope
	}
	slot, err := rt.limits.begin(p)
	if err != nil {
		return nil, nil, err
	}
	return p, slot, nil
}

// open checks that p may open thread (its token's thread patterns).
func open(p *auth.Principal, thread string) error {
	if !p.MayOpen(thread) {
		return errThreadDenied
	}
	return nil
}
