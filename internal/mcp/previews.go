package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/api"
)

// The preview tool: a link to a port inside the thread's sandbox (POST
// /threads/{thread}/previews), for a person to open a web app the agent
// started, through the same in-process gateway and credential as the other
// tools.

type exposePortIn struct {
	Port int    `json:"port" jsonschema:"The port a server listens on inside the sandbox (on 127.0.0.1 or all addresses), 1-65535."`
	TTL  string `json:"ttl,omitempty" jsonschema:"How long the link works, e.g. 30m or 2h. Default 1h."`
}

func addPreviewTools(srv *sdk.Server, t tools) {
	sdk.AddTool(srv, &sdk.Tool{Name: "expose_port", Description: "Get a link to a web server running in this sandbox " +
		"(for example one you started with python3 -m http.server 3000), for the user to open in a browser. The link " +
		"needs no other credential, opens that port only, and stops working when it expires or the sandbox is recreated."},
		t.exposePort)
}

func (t tools) exposePort(ctx context.Context, _ *sdk.CallToolRequest, in exposePortIn) (*sdk.CallToolResult, any, error) {
	if in.Port < 1 || in.Port > 65535 {
		return fail("Error: port must be 1-65535")
	}
	var p api.Preview
	err := t.sb.control(ctx, fileTimeout, http.MethodPost, "/previews", api.CreatePreview{Port: in.Port, TTL: in.TTL}, &p)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.code == "bad_request":
		return fail("Error: the gateway refused it: %s", ae.message)
	case err != nil:
		return controlFailed(err, "creating the link")
	}
	return text(fmt.Sprintf("Port %d of this sandbox is at %s until %s (link %s). Anyone with the link can open it; "+
		"a server that is not listening yet answers 502 until it is.", p.Port, p.URL, p.ExpiresAt.UTC().Format(time.RFC3339), p.ID))
}
