package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	units "github.com/docker/go-units"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/api"
)

// The template tools: what sandbox templates the gateway offers (GET
// /api/templates) and switching the thread's sandbox to one (PUT
// /threads/{thread}/sandbox), through the same in-process gateway and
// credential as the other tools.

type (
	listTemplatesIn struct{}
	useTemplateIn   struct {
		Template string            `json:"template" jsonschema:"The template's name, as list_templates shows it."`
		Env      map[string]string `json:"env,omitempty" jsonschema:"Optional environment variables (name to value) to set in the new sandbox; they replace those of an earlier use_template."`
	}
)

func addTemplateTools(srv *sdk.Server, t tools) {
	sdk.AddTool(srv, &sdk.Tool{Name: "list_templates", Description: "List the sandbox templates this gateway offers (each " +
		"an image with its memory limits) and which is the default. use_template switches this thread's sandbox to one.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listTemplates)
	sdk.AddTool(srv, &sdk.Tool{Name: "use_template", Description: "Replace this thread's sandbox with a new one made from " +
		"a template (list_templates names them), for example when the task needs tools the current image lacks. Files under " +
		userData + " stay; running processes stop, and anything installed outside " + userData + " is gone. The thread " +
		"keeps the template from then on."}, t.useTemplate)
}

func (t tools) listTemplates(ctx context.Context, _ *sdk.CallToolRequest, _ listTemplatesIn) (*sdk.CallToolResult, any, error) {
	var list api.TemplateList
	if err := t.sb.gatewayCall(ctx, fileTimeout, http.MethodGet, "/api/templates", nil, &list); err != nil {
		return controlFailed(err, "listing templates")
	}
	if len(list.Templates) == 0 {
		return text("This gateway offers no templates: every sandbox is made from its backend's configuration.")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d templates", len(list.Templates))
	if list.Default != "" {
		fmt.Fprintf(&b, " (default: %s)", list.Default)
	}
	b.WriteString(":")
	for _, tpl := range list.Templates {
		fmt.Fprintf(&b, "\n- %s", tpl.Name)
		if tpl.Default {
			b.WriteString(" (default)")
		}
		var facts []string
		if tpl.Image != "" {
			facts = append(facts, "image "+tpl.Image)
		}
		if tpl.Memory > 0 {
			facts = append(facts, "memory "+units.BytesSize(float64(tpl.Memory)))
		}
		if tpl.MaxMemory > tpl.Memory {
			facts = append(facts, "up to "+units.BytesSize(float64(tpl.MaxMemory)))
		}
		if len(tpl.EnvNames) > 0 {
			facts = append(facts, "sets "+strings.Join(tpl.EnvNames, ", "))
		}
		if len(facts) > 0 {
			b.WriteString(": " + strings.Join(facts, "; "))
		}
	}
	b.WriteString("\nuse_template switches this thread's sandbox to one.")
	return text(b.String())
}

func (t tools) useTemplate(ctx context.Context, _ *sdk.CallToolRequest, in useTemplateIn) (*sdk.CallToolResult, any, error) {
	if in.Template == "" {
		return fail("Error: template is required (list_templates shows the names)")
	}
	var view api.Sandbox
	err := t.sb.control(ctx, longTimeout, http.MethodPut, "/sandbox", api.CreateSandbox{Template: in.Template, Env: in.Env}, &view)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && (ae.code == "bad_request" || ae.code == "forbidden"):
		// Checked before anything is stored: the sandbox is as it was.
		return fail("Error: the gateway refused it, nothing was changed: %s", ae.message)
	case err != nil:
		return controlFailed(err, "switching the template")
	}
	switch view.Outcome {
	case "hit", "thawed":
		// Options as stored already: the running sandbox was kept.
		return text(fmt.Sprintf("This thread's sandbox (%s) already uses template %s with these settings: nothing was replaced.",
			view.SandboxID, view.Template))
	}
	return text(fmt.Sprintf("Replaced this thread's sandbox with one of template %s: sandbox %s, %s. Files under %s stay; "+
		"processes that were running are gone, and so is anything installed outside %s: restart servers you need.",
		view.Template, view.SandboxID, view.State, userData, userData))
}
