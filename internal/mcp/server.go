// Package mcp serves a thread's sandbox as an MCP server (streamable HTTP,
// github.com/modelcontextprotocol/go-sdk) with the agent tools DeerFlow
// gives its agents: bash, ls, read_file, write_file, str_replace, glob and
// grep, with DeerFlow's names, parameters, output shapes and limits; and
// Sandgate's own checkpoint, list_checkpoints, restore_checkpoint,
// fork_thread, list_templates and use_template.
//
// Every tool calls the gateway's own handler, in-process, as the MCP caller
// (its credential and Host): DeerFlow's tools the thread's sandbox /v1 API,
// so auth, provisioning on first use, idle touch, quotas, metrics and all
// backends are the data plane's; the checkpoint and template tools the
// thread's /threads/{thread}/checkpoints, /fork and /sandbox routes and
// /api/templates, authorized as the caller's own requests. The package knows nothing of pools or backends.
//
// The server is stateless: each POST is a whole MCP exchange on a
// throwaway session, so any replica behind a load balancer can answer any
// request of a client, and a replica that restarts loses nothing. The
// state an agent cares about (files, processes) lives in the sandbox, which
// every replica reaches through Redis.
package mcp

import (
	"context"
	"log/slog"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Server builds the MCP endpoint of each thread.
type Server struct {
	gateway http.Handler
	log     *slog.Logger
	schemas *sdk.SchemaCache // the tools' schemas, reflected once
}

// toolsVersion is the version the server reports: of its tool set, which
// follows DeerFlow's; the minor version counts Sandgate's additions (1.1:
// list_templates, use_template; 1.2: expose_port).
const toolsVersion = "1.2.0"

// New returns the MCP endpoints over gateway, the handler that serves
// /threads/{thread}/v1/... and the thread's control-plane routes.
func New(gateway http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	// The SDK logs every stateless request's session at Info: only its
	// warnings are worth a line.
	return &Server{gateway: gateway, log: slog.New(warnings{log.Handler()}), schemas: sdk.NewSchemaCache()}
}

// warnings passes on records at Warn and above.
type warnings struct{ slog.Handler }

func (h warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}
func (h warnings) WithAttrs(a []slog.Attr) slog.Handler { return warnings{h.Handler.WithAttrs(a)} }
func (h warnings) WithGroup(g string) slog.Handler      { return warnings{h.Handler.WithGroup(g)} }

// ServeThread answers one MCP request of r for thread, which the caller
// has validated and authorized. Tool calls go to /threads/{thread}/...
// with r's Authorization header, Host and remote address.
func (s *Server) ServeThread(w http.ResponseWriter, r *http.Request, thread string) {
	sb := &sandbox{gateway: s.gateway, thread: thread, prefix: "/threads/" + thread, host: r.Host,
		auth: r.Header.Get("Authorization"), remote: r.RemoteAddr}
	srv := sdk.NewServer(&sdk.Implementation{Name: "sandgate", Title: "Sandgate thread sandbox", Version: toolsVersion},
		&sdk.ServerOptions{Logger: s.log, SchemaCache: s.schemas})
	addTools(srv, sb)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless: true,
		// The gateway's own Host check (auth off) or credential (auth on)
		// already guards against DNS rebinding; the SDK's loopback rule
		// would refuse a gateway behind a local reverse proxy.
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
		Logger:                       s.log,
	})
	h.ServeHTTP(w, r)
}
