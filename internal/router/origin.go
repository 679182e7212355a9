package router

import (
	"net/url"

	"github.com/labstack/echo/v4"
)

// sameOrigin refuses requests a browser sends on behalf of another site: a
// sandbox API is remote code execution, and a page on any site could
// otherwise POST to a gateway on the user's loopback. Non-browser clients send
// neither header and pass; a page of the gateway's own origin passes.
func sameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if h.Get("Sec-Fetch-Site") == "cross-site" {
			return errCrossSite
		}
		if origin := h.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host != c.Request().Host {
				return errCrossSite
			}
		}
		return next(c)
	}
}
