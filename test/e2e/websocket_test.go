package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWebSocketThroughGateway opens the sandbox's terminal socket through
// the gateway: the upgrade passes through and both directions stream.
func TestWebSocketThroughGateway(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/threads/term/v1/shell/ws", nil)
	if err != nil {
		t.Fatalf("dial through gateway: %v (resp %v)", err, resp)
	}
	defer ws.CloseNow()

	run := func(line string) (string, int) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("read after %q: %v", line, err)
			}
			var exit struct {
				Type     string `json:"type"`
				ExitCode int    `json:"exit_code"`
			}
			if strings.HasPrefix(string(msg), "{") && json.Unmarshal(msg, &exit) == nil && exit.Type == "exit" {
				return out.String(), exit.ExitCode
			}
			out.Write(msg)
		}
	}
	if _, code := run("cd /mnt/user-data/outputs"); code != 0 {
		t.Fatalf("cd exit %d", code)
	}
	if out, code := run("pwd; echo done"); code != 0 || out != "/mnt/user-data/outputs\ndone\n" {
		t.Fatalf("pwd: %q exit %d", out, code)
	}
	if _, code := run("exit 3"); code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
	// The socket counts as a request in flight: the sandbox is the thread's.
	if v := sandboxOf(t, g.URL, "term"); v.State != "active" {
		t.Fatalf("sandbox %+v", v)
	}
	if err := ws.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close: %v", err)
	}
}
