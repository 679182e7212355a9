package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/testutil"
)

func TestEventIDForm(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0a1b-2c:0", "0a1b-2c:17", "0a1b-2c:5.9223372036854775807"} {
		cmd, offs, err := parseEventID(id)
		if err != nil || eventID(cmd, offs) != id {
			t.Errorf("%q: %q %v %v", id, cmd, offs, err)
		}
	}
	for _, id := range []string{
		"", "abc", ":0", "abc:", "abc:.", "abc:1.", "abc:1.2.3", "ABC:1", "ab c:1", "abc:+1", "abc:-1",
		"abc:01", "abc: 1", "abc:1 ", "abc:1x", "abc:9223372036854775808", "a:b:1", strings.Repeat("a", 65) + ":1",
	} {
		if _, _, err := parseEventID(id); err == nil {
			t.Errorf("%q parsed", id)
		} else if ae := (*apiError)(nil); !errors.As(err, &ae) || ae.status != http.StatusBadRequest {
			t.Errorf("%q: %v, want a 400", id, err)
		}
	}
}

// sse posts body to path as an SSE request, resuming from lastID unless
// that is "".
func (ts *testServer) sse(t *testing.T, ctx context.Context, path, body, lastID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// streamed is what an SSE stream carried: start's and every event's ids,
// the output events' text, and the result's data.
type streamed struct {
	startID, lastID, output string
	outputs                 int
	result                  *shellResult
}

// readStream reads events until the result, or until stop says so after
// an output event (then the connection is left to the caller to drop).
func readStream(t *testing.T, res *http.Response, stop func(streamed) bool) streamed {
	t.Helper()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("stream: %d %s", res.StatusCode, b)
	}
	var s streamed
	rd := testutil.NewSSEReader(res.Body)
	for {
		ev, err := rd.Next()
		if err != nil {
			t.Fatalf("stream ended before result (%v): %+v", err, s)
		}
		if ev.ID == "" {
			t.Fatalf("event %s without id", ev.Name)
		}
		s.lastID = ev.ID
		switch ev.Name {
		case "start":
			s.startID = ev.ID
		case "output":
			var o struct{ Output string }
			if err := json.Unmarshal([]byte(ev.Data), &o); err != nil {
				t.Fatal(err)
			}
			s.output += o.Output
			s.outputs++
			if stop != nil && stop(s) {
				return s
			}
		case "result":
			var env struct{ Data shellResult }
			if err := json.Unmarshal([]byte(ev.Data), &env); err != nil {
				t.Fatal(err)
			}
			s.result = &env.Data
			return s
		}
	}
}

func numberedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	return b.String()
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A client that drops its stream mid-command loses nothing: the command
// runs on, and a resume with the last id seen (a re-sent exec, or view)
// sends what was missed, then the rest and the result, without running the
// command again.
func TestSSEResumeAfterDisconnect(t *testing.T) {
	t.Parallel()
	const n = 40
	cmd := `echo ran >> runs.txt; for i in $(seq 1 40); do echo line $i; sleep 0.02; done`
	for _, tc := range []struct {
		name string
		path func(session string) (string, string)
	}{
		{"re-sent exec", func(session string) (string, string) {
			return "/v1/shell/exec", `{"id":"` + session + `","command":` + quote(cmd) + `}`
		}},
		{"view", func(session string) (string, string) { return "/v1/shell/view", `{"id":"` + session + `"}` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newHostServer(t)
			ts.post(t, "/v1/shell/sessions/create", map[string]any{"id": "s"})
			ctx, drop := context.WithCancel(context.Background())
			res := ts.sse(t, ctx, "/v1/shell/exec", `{"id":"s","command":`+quote(cmd)+`}`, "")
			first := readStream(t, res, func(s streamed) bool { return strings.Contains(s.output, "line 5\n") })
			drop()
			res.Body.Close()

			path, body := tc.path("s")
			res = ts.sse(t, context.Background(), path, body, first.lastID)
			defer res.Body.Close()
			rest := readStream(t, res, nil)
			if rest.startID != first.lastID {
				t.Errorf("resumed start id %q, want the Last-Event-ID %q", rest.startID, first.lastID)
			}
			if got := first.output + rest.output; got != numberedLines(n) {
				t.Fatalf("output across the drop:\n%q\nthen\n%q", first.output, rest.output)
			}
			if rest.result.Status != statusCompleted || rest.result.Output != numberedLines(n) {
				t.Errorf("result %+v", rest.result)
			}
			if runs, _ := os.ReadFile(filepath.Join(ts.ws, "runs.txt")); string(runs) != "ran\n" {
				t.Errorf("the command ran %d times", strings.Count(string(runs), "ran"))
			}
		})
	}
}

// Resuming a command that has ended sends the rest and the result at once;
// from the result's own id, nothing but start and result.
func TestSSEResumeFinishedCommand(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	ts.post(t, "/v1/shell/sessions/create", map[string]any{"id": "s"})
	res := ts.sse(t, context.Background(), "/v1/shell/exec", `{"id":"s","command":"echo a; echo b"}`, "")
	full := readStream(t, res, nil)
	res.Body.Close()
	for _, tc := range []struct{ from, want string }{{full.startID, "a\nb\n"}, {full.lastID, ""}} {
		res := ts.sse(t, context.Background(), "/v1/shell/view", `{"id":"s"}`, tc.from)
		got := readStream(t, res, nil)
		res.Body.Close()
		if got.output != tc.want || got.lastID != full.lastID || got.result.Output != "a\nb\n" {
			t.Errorf("from %s: output %q, last id %s (want %q, %s), result %+v", tc.from, got.output, got.lastID, tc.want, full.lastID, got.result)
		}
	}
}

// Bad or unknown Last-Event-IDs are JSON errors, and never start a command.
func TestSSEResumeRefusals(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	ts.post(t, "/v1/shell/sessions/create", map[string]any{"id": "s"})
	res := ts.sse(t, context.Background(), "/v1/shell/exec", `{"id":"s","command":"echo abc"}`, "")
	done := readStream(t, res, nil)
	res.Body.Close()
	cmdID, _, _ := strings.Cut(done.lastID, ":")
	ts.post(t, "/v1/shell/sessions/create", map[string]any{"id": "other"})
	for _, tc := range []struct {
		path, body, lastID string
		status             int
	}{
		{"/v1/shell/exec", `{"id":"s","command":"echo ran >> runs.txt"}`, "not-an-id", 400},
		{"/v1/shell/view", `{"id":"s"}`, cmdID + ":1.2.3", 400},
		{"/v1/shell/view", `{"id":"s"}`, cmdID + ":0.0", 400},   // one stream, two offsets
		{"/v1/shell/view", `{"id":"s"}`, cmdID + ":999", 400},   // past the output
		{"/v1/shell/view", `{"id":"other"}`, cmdID + ":0", 404}, // another session's
		{"/v1/shell/exec", `{"command":"echo ran >> runs.txt"}`, "0123abcd:0", 404},
	} {
		r := ts.send(t, http.MethodPost, tc.path, http.Header{"Content-Type": {"application/json"},
			"Accept": {"text/event-stream"}, "Last-Event-ID": {tc.lastID}}, strings.NewReader(tc.body))
		if r.Status != tc.status || r.Success {
			t.Errorf("%s with %q: %d %s, want %d", tc.path, tc.lastID, r.Status, r.Body, tc.status)
		}
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "runs.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused resume ran its command: %v", err)
	}
}
