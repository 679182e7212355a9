package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// resumeLines is how many numbered lines the resumed command prints, one
// every 50 ms.
const resumeLines = 60

// resumeCommand prints the numbered lines and notes each run of itself in
// the workspace, so a second run would show.
var resumeCommand = fmt.Sprintf(`echo ran >> /mnt/user-data/workspace/runs.txt; `+
	`for i in $(seq 1 %d); do echo line $i; sleep 0.05; done`, resumeLines)

// sseExec posts a shell/exec for command as an SSE stream through base,
// resuming from lastID unless that is "".
func sseExec(t *testing.T, ctx context.Context, base, thread, command, lastID string) *http.Response {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/threads/"+thread+"/v1/shell/exec", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := clientFor(base).Do(req)
	if err != nil {
		t.Fatalf("exec stream via %s: %v", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("exec stream via %s: status %d", base, resp.StatusCode)
	}
	return resp
}

// execStream is what a client kept of an exec stream.
type execStream struct {
	output, lastID string
	result         *execData
	first          time.Time // when the first event arrived
}

// read takes events from rd into s until the result, a read error (the
// replica died), or stop says so after an output event.
func (s *execStream) read(t *testing.T, rd *testutil.SSEReader, stop func() bool) error {
	t.Helper()
	for {
		ev, err := rd.Next()
		if err != nil {
			return err
		}
		if s.first.IsZero() {
			s.first = time.Now()
		}
		if ev.ID == "" {
			t.Fatalf("%s event without an id", ev.Name)
		}
		s.lastID = ev.ID
		switch ev.Name {
		case "output":
			var o struct{ Output string }
			if err := json.Unmarshal([]byte(ev.Data), &o); err != nil {
				t.Fatalf("output event %q: %v", ev.Data, err)
			}
			s.output += o.Output
			if stop != nil && stop() {
				return nil
			}
		case "result":
			var env envelope
			var d execData
			if err := json.Unmarshal([]byte(ev.Data), &env); err != nil || json.Unmarshal(env.Data, &d) != nil {
				t.Fatalf("result event %q", ev.Data)
			}
			s.result = &d
			return nil
		}
	}
}

// An exec streamed through replica a, which is SIGKILLed mid-command, is
// resumed through replica b with the Last-Event-ID the client saw: the
// output arrives exactly once, in order, and the command ran once.
func TestStreamResumesOnAnotherReplicaAfterSIGKILL(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a, b := f.start(), f.start()
	const thread = "resume"
	shell(t, a.URL, thread, "true") // the sandbox exists before the stream starts

	first := &execStream{}
	resp := sseExec(t, context.Background(), a.URL, thread, resumeCommand, "")
	rd := testutil.NewSSEReader(resp.Body)
	if err := first.read(t, rd, func() bool { return strings.Contains(first.output, "line 10\n") }); err != nil {
		t.Fatalf("stream via a ended early: %v (%q)", err, first.output)
	}
	a.kill()
	// What a had sent before it died is still the client's to read.
	err := first.read(t, rd, nil)
	resp.Body.Close()
	if first.result != nil || err == nil {
		t.Fatalf("the stream through the killed replica went on to its result (%v): the kill came too late", err)
	}

	began := time.Now()
	second := &execStream{}
	resp = sseExec(t, context.Background(), b.URL, thread, resumeCommand, first.lastID)
	defer resp.Body.Close()
	if err := second.read(t, testutil.NewSSEReader(resp.Body), nil); err != nil || second.result == nil {
		t.Fatalf("resumed stream via b ended without its result: %v (%q)", err, second.output)
	}
	t.Logf("reattach through replica b: %s to the first event; %d bytes before the kill, %d after",
		second.first.Sub(began), len(first.output), len(second.output))

	var want strings.Builder
	for i := 1; i <= resumeLines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := first.output + second.output; got != want.String() {
		t.Fatalf("output across the kill is not every line once, in order:\nbefore: %q\nafter: %q", first.output, second.output)
	}
	if second.result.Status != "completed" || second.result.Output != want.String() {
		t.Errorf("result: %+v", second.result)
	}
	if runs := shell(t, b.URL, thread, "wc -l < /mnt/user-data/workspace/runs.txt"); strings.TrimSpace(runs.Output) != "1" {
		t.Errorf("the command ran %s times", strings.TrimSpace(runs.Output))
	}
}
