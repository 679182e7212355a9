package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// withBearer adds a credential to every request of the MCP client.
type withBearer struct {
	token string
	next  http.RoundTripper
}

func (b withBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// mcpConnect connects the MCP Go SDK's own client to a thread's endpoint on
// replica g as the holder of token.
func mcpConnect(ctx context.Context, g *gateway, thread, token string) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	return c.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:             g.URL + "/threads/" + thread + "/mcp",
		HTTPClient:           &http.Client{Transport: withBearer{token, g.client.Transport}},
		DisableStandaloneSSE: true, // stateless: there is no server-to-client stream
		MaxRetries:           -1,
	}, nil)
}

func mcpText(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// TestMCPThreadEndpoint: the MCP Go SDK's client against
// /threads/{t}/mcp on two replicas of one fleet with API keys. Listing the
// tools provisions nothing; the first tool call does; all seven tools work;
// a client connected to the other replica sees the same files; another
// user's same-named thread is another sandbox; no credential, no session.
func TestMCPThreadEndpoint(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key")+",bob="+sha("bob-key"))
	a, b := f.start(), f.start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const thread, w = "mcp-e2e", "/mnt/user-data/workspace"
	auth := bearer("alice-key")

	if _, err := mcpConnect(ctx, a, thread, "wrong-key"); err == nil {
		t.Fatal("connected with an unknown API key")
	}
	cs, err := mcpConnect(ctx, a, thread, "alice-key")
	if err != nil {
		t.Fatalf("connect to replica A: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"bash", "checkpoint", "expose_port", "fork_thread", "glob", "grep", "list_checkpoints", "list_templates", "ls", "read_file",
		"restore_checkpoint", "str_replace", "use_template", "write_file"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	if code, body, _ := call(t, "GET", a.URL+"/threads/"+thread+"/sandbox", nil, auth...); code != http.StatusNotFound {
		t.Fatalf("sandbox before the first tool call: %d %s", code, body)
	}

	// The first tool call provisions the thread's sandbox.
	if got, isErr := mcpText(t, cs, "bash", map[string]any{"command": "echo hello from $(pwd)"}); isErr || got != "hello from "+w+"\n" {
		t.Fatalf("bash: %v %q", isErr, got)
	}
	if code, body, _ := call(t, "GET", a.URL+"/threads/"+thread+"/sandbox", nil, auth...); code != http.StatusOK ||
		!strings.Contains(string(body), `"state":"active"`) {
		t.Fatalf("sandbox after the first tool call: %d %s", code, body)
	}

	steps := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"write_file", map[string]any{"path": w + "/app/main.py", "content": "def main():\n    print('hi')\n"}, "OK"},
		{"write_file", map[string]any{"path": w + "/app/main.py", "content": "main()\n", "append": true}, "OK"},
		{"read_file", map[string]any{"path": w + "/app/main.py", "start_line": 2, "end_line": 3}, "    print('hi')\nmain()\n"},
		{"str_replace", map[string]any{"path": w + "/app/main.py", "old_str": "'hi'", "new_str": "'bye'"}, "OK"},
		{"read_file", map[string]any{"path": w + "/app/main.py"}, "def main():\n    print('bye')\nmain()\n"},
		{"ls", map[string]any{"path": w + "/app"}, w + "/app\n" + w + "/app/main.py"},
		{"glob", map[string]any{"pattern": "*.py", "path": w}, "Found 1 paths under " + w + "\n1. " + w + "/app/main.py"},
		{"grep", map[string]any{"pattern": "BYE", "path": w}, "Found 1 matches under " + w + "\n" + w + "/app/main.py:2:     print('bye')"},
		{"bash", map[string]any{"command": "ls app"}, "main.py\n"},
	}
	for _, s := range steps {
		if got, isErr := mcpText(t, cs, s.tool, s.args); isErr || got != s.want {
			t.Fatalf("%s %v on replica A:\n got %v %q\nwant %q", s.tool, s.args, isErr, got, s.want)
		}
	}

	// A second client, on the other replica, sees the same files.
	cs2, err := mcpConnect(ctx, b, thread, "alice-key")
	if err != nil {
		t.Fatalf("connect to replica B: %v", err)
	}
	defer cs2.Close()
	if got, isErr := mcpText(t, cs2, "read_file", map[string]any{"path": w + "/app/main.py"}); isErr || got != "def main():\n    print('bye')\nmain()\n" {
		t.Fatalf("read_file on replica B: %v %q", isErr, got)
	}
	if got, _ := mcpText(t, cs2, "bash", map[string]any{"command": "cat app/main.py | wc -l"}); strings.TrimSpace(got) != "3" {
		t.Fatalf("bash on replica B: %q", got)
	}
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("%d sandboxes for one thread used from two replicas", n)
	}

	// Bad input is a tool error, not a failed request.
	if got, isErr := mcpText(t, cs2, "read_file", map[string]any{"path": w + "/nope"}); !isErr || got != "Error: File not found: "+w+"/nope" {
		t.Fatalf("missing file: %v %q", isErr, got)
	}

	// Bob's thread of the same name is his own sandbox.
	cs3, err := mcpConnect(ctx, b, thread, "bob-key")
	if err != nil {
		t.Fatal(err)
	}
	defer cs3.Close()
	if got, isErr := mcpText(t, cs3, "read_file", map[string]any{"path": w + "/app/main.py"}); !isErr || !strings.Contains(got, "File not found") {
		t.Fatalf("bob read alice's file: %v %q", isErr, got)
	}
}
