package router

import (
	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/mcp"
)

// mcpRoutes serves /threads/{thread}/mcp: the thread's sandbox as an MCP
// server (streamable HTTP, stateless; internal/mcp). Its auth is the
// /threads routes': the threads scope and the token's thread patterns. Its
// tools call this router in-process at /threads/{thread}/v1/... with the
// caller's credential, so a tool call is a data-plane request in every
// respect (provisioning on first use, quotas, metrics, access log); it
// counts against the user's requests in flight besides the MCP request.
func (rt *Router) mcpRoutes(e *echo.Echo) {
	srv := mcp.New(rt, rt.log)
	e.Any("/threads/:thread/mcp", rt.need(threads, func(c echo.Context, p *auth.Principal) error {
		thread, err := threadParam(c, p)
		if err != nil {
			return err
		}
		srv.ServeThread(c.Response(), c.Request(), thread)
		return nil
	}))
}
