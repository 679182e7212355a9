// Package sandbox is the server that runs inside every sandbox
// (`gateway sandbox`): an AIO-compatible subset of the all-in-one sandbox
// API (agent-infra/sandbox), so DeerFlow's AioSandbox and the generated
// agent-sandbox SDKs work against it. Every JSON response is the envelope
// {"success", "message", "data"}; a 422 also carries FastAPI-style
// "detail" naming the field. contract_schema_test.go holds the AIO 1.9.4
// schema the answers are checked against; README lists the endpoints.
//
// Modes. Without --map flags it runs in container mode: paths are real. With
// mappings (host mode, used by the process backend) every path in a request
// is mapped virtual -> host through a PathMap, host paths in every response
// are mapped back, and file calls outside the mappings or writes to
// read-only ones are refused with 403. Host mode isolates file calls, not
// shell commands: those run in a real shell on the host.
//
// Shell calls follow the all-in-one sandbox where DeerFlow and the SDKs
// depend on it (shell_api.go):
//   - shell/exec without `id` runs in the server's one default session, so
//     `cd /tmp` in one id-less call holds in the next; `session_id` in the
//     result names it. bash/exec without `session_id` runs in a new
//     session that inherits nothing and whose id stays reusable; in any
//     session a bash/exec command's `cd`/`export` never reach later calls
//     (AIO's BashExecRequest).
//   - A command started with async_mode reads a pipe that shell/write and
//     bash/write feed; others read /dev/null.
//   - `timeout` is how long the call waits: past it the call returns status
//     running with the output so far, and the command goes on (shell/view
//     follows it, shell/kill stops it). Only `hard_timeout` kills the
//     command's process group.
//
// Browsers (guard.go). The API runs commands and often listens on loopback,
// where any page in the user's browser can reach it, so:
//   - A request a browser sends on behalf of another site is refused with
//     403, on every endpoint, WebSocket included: `Sec-Fetch-Site:
//     cross-site`, or an Origin whose host is neither the request's Host nor
//     one listed in X-Forwarded-Host (the gateway proxies with Host = the
//     sandbox and X-Forwarded-Host = itself). Non-browser clients send
//     neither header and pass.
//   - Every JSON POST requires `Content-Type: application/json` (parameters
//     such as charset allowed) and answers anything else, or none, with 415;
//     file/upload requires multipart/form-data. A page cannot send
//     application/json cross-origin without a CORS preflight, which the
//     server never approves.
//
// GET /v1/shell/ws is a line-based terminal over WebSocket (ws.go): each
// text message is a command line run in a session; output comes back as
// text messages while it is produced, then {"type":"exit","exit_code":N}.
//
// Sandgate's own routes, under /v1/sandgate/ (sandboxspec): the activity
// probe (activity.go); a freezer and statistics for a backend with none of
// its own (admin.go): the sandbox's processes are, as PID 1 of a PID
// namespace, every process there, and otherwise the server's descendants
// only (admin_linux.go); its figures come from its own cgroup when it has
// one (cgroup_linux.go), else from /proc; the command log (cmdlog.go),
// every command that ended, with who ran it (sandboxspec.CallerHeader).
//
// Choices, documented where they are implemented:
//   - Shell sessions fork rather than serialize concurrent calls (session.go).
//   - Each command is a fresh `shell -c` in its own process group; its cwd and
//     exported env come back through a state file (process.go).
//   - Output over --max-output keeps head and tail around
//     "\n...[output truncated: N bytes omitted]...\n" (outbuf.go).
//   - Binary file reads return base64 with "encoding": "base64" (file_api.go).
//   - SSE events are start, output, result (sse.go).
package sandbox
