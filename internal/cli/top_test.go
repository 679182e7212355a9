package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// statsSeries serves /admin/v1/stats whose nth answer (from 1) is a
// sandbox that used 0.5 s of CPU more each second of sample time: 50 %
// between any two. onCall runs after each answer with its number.
func statsSeries(t *testing.T, onCall func(n int)) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/v1/stats" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		at := time.Date(2020, 1, 1, 0, 0, n, 0, time.UTC).Format(time.RFC3339)
		fmt.Fprintf(w, `{"supported":true,"count":1,"sandboxes":[{"sandbox_id":"0123456789abcdef","user":"alice","thread":"t1",`+
			`"backend":"process","state":"active","cpu_seconds":%g,"memory_bytes":%d,"pids":2,"at":%q,`+
			`"data_bytes":20971520,"egress_sent_bytes":2048,"egress_received_bytes":%d}]}`, 0.5*float64(n), n<<20, at, 3<<20)
		onCall(n)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// lockedBuffer is Stdout written by a top running in another goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTopLiveUntilCancelled: top without --once redraws a frame per
// sample, each with the CPU % and memory of its sample, and Ctrl-C (the
// context ending) ends it with success; --once prints one table from
// two samples and asks nothing more.
func TestTopLiveUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := statsSeries(t, func(n int) {
		if n == 4 {
			cancel() // after three frames' samples: Ctrl-C
		}
	})
	var out, errb lockedBuffer
	code := Main(ctx, Env{Args: []string{"sandboxes", "top", "--interval", "20ms"}, Getenv: func(k string) string {
		return map[string]string{"SANDGATE_URL": srv.URL}[k]
	}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	got := out.String()
	if code != ExitOK {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), got)
	}
	frames := strings.Split(strings.TrimRight(got, "\n"), "\n\n")
	if len(frames) < 2 || len(frames) > 3 || strings.Contains(got, "\x1b[") {
		t.Fatalf("want 2 or 3 frames one after another (not a terminal: no escapes), got %d:\n%s", len(frames), got)
	}
	for i, fr := range frames {
		// Frame i is the (i+2)th sample: its memory, and 50 % since the last.
		if !strings.HasPrefix(fr, "SANDBOX ID") || !strings.Contains(fr, " 50.0 ") || !strings.Contains(fr, fmt.Sprintf(" %d.0MiB ", i+2)) {
			t.Errorf("frame %d:\n%s", i, fr)
		}
	}

	var calls sync.Map
	srv = statsSeries(t, func(n int) { calls.Store(n, true) })
	var once lockedBuffer
	code = Main(context.Background(), Env{Args: []string{"sandboxes", "top", "--once", "--interval", "1ms"}, Getenv: func(k string) string {
		return map[string]string{"SANDGATE_URL": srv.URL}[k]
	}, Stdin: strings.NewReader(""), Stdout: &once, Stderr: &errb})
	lines := strings.Split(strings.TrimRight(once.String(), "\n"), "\n")
	if _, third := calls.Load(3); code != ExitOK || len(lines) != 2 || !strings.Contains(lines[1], " 50.0 ") || third {
		t.Fatalf("--once: exit %d, a third sample asked: %v\n%s", code, third, once.String())
	}
	// The disk and egress columns: data, no layer, bytes out and in.
	if h, row := strings.Fields(lines[0]), strings.Fields(lines[1]); strings.Join(h[len(h)-6:], " ") != "DATA LAYER EGRESS OUT EGRESS IN" ||
		len(row) != len(h)-4 || strings.Join(row[len(row)-4:], " ") != "20.0MiB - 2.0KiB 3.0MiB" {
		t.Errorf("--once: the disk and egress columns:\n%s", once.String())
	}
}
