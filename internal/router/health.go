package router

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/backend"
)

// healthz: the process is alive.
func (rt *Router) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, api.Health{Status: "ok", Version: rt.version, Revision: rt.revision})
}

// readyz: Redis and the backend answer, and the gateway is not draining.
func (rt *Router) readyz(c echo.Context) error {
	if rt.draining.Load() {
		return c.JSON(http.StatusServiceUnavailable, api.Health{Status: "draining"})
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	for _, p := range rt.ready {
		if err := p.Ping(ctx); err != nil {
			rt.log.WarnContext(ctx, "not ready", "err", err)
			reason := "dependency unreachable"
			var image *backend.ImageError
			if errors.As(err, &image) {
				reason = "sandbox image " + image.Image + " is missing: build, load or pull it"
			}
			return c.JSON(http.StatusServiceUnavailable, api.Health{Status: "unavailable", Reason: reason})
		}
	}
	return c.JSON(http.StatusOK, api.Health{Status: "ok"})
}
