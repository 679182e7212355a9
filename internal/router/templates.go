package router

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
)

// applyCreate stores a create's options for (user, thread): checked
// whole first, so a refused body changes nothing; then the egress policy
// (admins only), then the options.
func (rt *Router) applyCreate(ctx context.Context, p *auth.Principal, user, thread string, req api.CreateSandbox) error {
	o := pool.Options{Template: req.Template, Env: req.Env, Memory: req.Memory, Metadata: req.Metadata}
	if err := rt.pool.CheckOptions(o); err != nil {
		return err
	}
	if err := rt.setEgress(ctx, p, identity.SandboxID(user, thread), req.Egress); err != nil {
		return err
	}
	return rt.pool.SetOptions(ctx, user, thread, o)
}

// listTemplates is GET /api/templates: what a create may choose from.
func (rt *Router) listTemplates(c echo.Context, _ *auth.Principal) error {
	list, def := rt.pool.Templates()
	out := api.TemplateList{Default: def, Templates: make([]api.Template, 0, len(list))}
	for _, t := range list {
		v := api.Template{Name: t.Name, Default: t.Name == def, Image: t.Backend.Image, Memory: t.Backend.Memory,
			MaxMemory: max(t.MaxMemory, t.Backend.Memory), EnvNames: slices.Sorted(maps.Keys(t.Env)), Prewarm: t.Prewarm}
		if t.Egress != nil {
			v.Egress = string(t.Egress.EffectiveMode())
		}
		out.Templates = append(out.Templates, v)
	}
	return c.JSON(http.StatusOK, out)
}

// provisionerTemplate maps a provisioner create's template or DeerFlow
// image to a template name: the named template, else the one whose image
// or name the image is, else "" (the default: DeerFlow sends its
// configured image whatever the provisioner runs).
func (rt *Router) provisionerTemplate(req api.ProvisionerCreate) string {
	if req.Template != "" {
		return req.Template
	}
	if req.Image == "" {
		return ""
	}
	list, _ := rt.pool.Templates()
	for _, t := range list {
		if t.Backend.Image == req.Image || t.Name == req.Image {
			return t.Name
		}
	}
	return ""
}

// optionError answers a refused create option: 400, or 403 past the
// operator's limits, naming the field.
func optionError(err error) (apiError, string, bool) {
	var oe *pool.OptionError
	if !errors.As(err, &oe) {
		return apiError{}, "", false
	}
	if oe.Forbidden {
		return apiError{http.StatusForbidden, "forbidden", oe.Error(), 0}, oe.Field, true
	}
	return apiError{http.StatusBadRequest, "bad_request", oe.Error(), 0}, oe.Field, true
}
