package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/webhook"
)

// The webhook endpoints of the operator API, /admin/v1/webhooks (admin
// scope): register, list with delivery stats, delete, dead letters.

// Webhooks registers webhook endpoints and reports their deliveries
// (webhook.Service).
type Webhooks interface {
	Create(ctx context.Context, e webhook.Endpoint) (webhook.Endpoint, error)
	List(ctx context.Context) ([]webhook.View, error)
	Delete(ctx context.Context, id string) error
	DeadLetters(ctx context.Context, id string, n int64) ([]webhook.DeadLetter, error)
}

const (
	defaultDeadLetters = 100
	maxDeadLetters     = 1000
)

func (rt *Router) registerWebhooks(e *echo.Echo) {
	g := e.Group("/admin/v1/webhooks")
	g.GET("", rt.need(adminOnly, rt.webhookList))
	g.POST("", rt.need(adminOnly, rt.webhookCreate))
	g.DELETE("/:id", rt.need(adminOnly, rt.webhookDelete))
	g.GET("/:id/dead-letters", rt.need(adminOnly, rt.webhookDeadLetters))
}

func (rt *Router) webhooksHere() error {
	if rt.webhooks == nil {
		return errNoWebhooks
	}
	return nil
}

// webhookCreate is POST /admin/v1/webhooks {"url", "events", "secret"}:
// 201 with the endpoint and its secret (made when not given), the only
// answer that shows it.
func (rt *Router) webhookCreate(c echo.Context, _ *auth.Principal) error {
	if err := rt.webhooksHere(); err != nil {
		return err
	}
	var req struct {
		URL    string        `json:"url"`
		Events []events.Type `json:"events"`
		Secret string        `json:"secret"`
	}
	if err := decodeOptional(c, &req); err != nil {
		if errors.Is(err, errBadCheckpointBody) {
			err = fmt.Errorf("%w: %w", errBadWebhookBody, err)
		}
		return err
	}
	ep, err := rt.webhooks.Create(c.Request().Context(), webhook.Endpoint{URL: req.URL, Events: req.Events, Secret: req.Secret})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, ep)
}

// webhookList is GET /admin/v1/webhooks: every endpoint (configured and
// registered) with its fleet-wide delivery stats, no secrets.
func (rt *Router) webhookList(c echo.Context, _ *auth.Principal) error {
	if err := rt.webhooksHere(); err != nil {
		return err
	}
	list, err := rt.webhooks.List(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"count": len(list), "endpoints": list})
}

// webhookDelete is DELETE /admin/v1/webhooks/{id}: 204; a configured
// endpoint is 409 (the configuration would bring it back).
func (rt *Router) webhookDelete(c echo.Context, _ *auth.Principal) error {
	if err := rt.webhooksHere(); err != nil {
		return err
	}
	if err := rt.webhooks.Delete(c.Request().Context(), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// webhookDeadLetters is GET /admin/v1/webhooks/{id}/dead-letters?limit=N:
// the endpoint's dead letters, newest first (limit 1-1000, default 100).
func (rt *Router) webhookDeadLetters(c echo.Context, _ *auth.Principal) error {
	if err := rt.webhooksHere(); err != nil {
		return err
	}
	n := int64(defaultDeadLetters)
	if s := c.QueryParam("limit"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 || v > maxDeadLetters {
			return errBadLimit
		}
		n = v
	}
	list, err := rt.webhooks.DeadLetters(c.Request().Context(), c.Param("id"), n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"count": len(list), "dead_letters": list})
}
