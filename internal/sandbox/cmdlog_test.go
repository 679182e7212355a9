package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

func TestCommandLogRingKeepsTheLastRecords(t *testing.T) {
	t.Parallel()
	var l cmdLog
	if got := l.last(0); len(got.Records) != 0 || got.Dropped != 0 {
		t.Fatalf("empty log: %+v", got)
	}
	const extra = 10
	for i := range sandboxspec.MaxCommandRecords + extra {
		l.add(sandboxspec.CommandRecord{CommandID: fmt.Sprint(i)})
	}
	all := l.last(0)
	if len(all.Records) != sandboxspec.MaxCommandRecords || all.Dropped != extra {
		t.Fatalf("kept %d, dropped %d; want %d, %d", len(all.Records), all.Dropped, sandboxspec.MaxCommandRecords, extra)
	}
	for i, rec := range all.Records {
		if want := uint64(extra + i + 1); rec.Seq != want || rec.CommandID != fmt.Sprint(extra+i) {
			t.Fatalf("record %d: seq %d id %s; want seq %d id %d (oldest first)", i, rec.Seq, rec.CommandID, want, extra+i)
		}
	}
	last := l.last(3)
	if len(last.Records) != 3 || last.Records[2].Seq != sandboxspec.MaxCommandRecords+extra || last.Records[0].Seq != sandboxspec.MaxCommandRecords+extra-2 {
		t.Fatalf("last 3: %+v", last.Records)
	}
	if got := l.last(sandboxspec.MaxCommandRecords * 2); len(got.Records) != sandboxspec.MaxCommandRecords {
		t.Fatalf("a limit past the bound: %d records", len(got.Records))
	}
}

func TestBoundedCommandCutsOnACharacter(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", sandboxspec.MaxRecordedCommand-1) + "é" + "tail"
	got := boundedCommand(long)
	if len(got) != sandboxspec.MaxRecordedCommand-1 || !strings.HasPrefix(long, got) {
		t.Fatalf("cut at %d bytes, want before the 2-byte é at %d", len(got), sandboxspec.MaxRecordedCommand-1)
	}
	if short := "echo hi"; boundedCommand(short) != short {
		t.Fatal("a short command changed")
	}
}

// syncBuffer is a log sink the server's goroutines write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCommandLogRecordsHowEachCommandEnded runs commands that succeed,
// fail, hit their hard timeout and are killed, through the shell, bash and
// code APIs, and reads their records back from the route and the log.
func TestCommandLogRecordsHowEachCommandEnded(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	ts := newHostServerWith(t, Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), MaxOutput: 1000})
	as := func(who string, path string, body map[string]any) apiResp {
		raw, _ := json.Marshal(body)
		h := http.Header{"Content-Type": {"application/json"}}
		if who != "" {
			h.Set(sandboxspec.CallerHeader, who)
		}
		r := ts.send(t, http.MethodPost, path, h, bytes.NewReader(raw))
		if r.Status != http.StatusOK {
			t.Fatalf("POST %s %v: %d %s", path, body, r.Status, r.Body)
		}
		return r
	}
	idOf := func(r apiResp) string {
		var v struct {
			CommandID string `json:"command_id"`
		}
		_ = json.Unmarshal(r.Data, &v)
		return v.CommandID
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		as("alice", "/v1/shell/sessions/create", map[string]any{"id": id})
	}
	longCmd := "echo " + strings.Repeat("x", 3000)
	ids := map[string]string{
		"ok":     idOf(as("alice", "/v1/shell/exec", map[string]any{"id": "s1", "command": "printf %s%s hel lo"})),
		"fail":   idOf(as("alice", "/v1/shell/exec", map[string]any{"id": "s1", "command": "echo oo''ps >&2; exit 3"})),
		"hard":   idOf(as("bob", "/v1/shell/exec", map[string]any{"command": "sleep 10", "hard_timeout": 0.3})),
		"bash":   idOf(as("capability:alice", "/v1/bash/exec", map[string]any{"command": "head -c 5000 /dev/zero"})),
		"long":   idOf(as("", "/v1/shell/exec", map[string]any{"id": "s2", "command": longCmd})),
		"killed": idOf(as("alice", "/v1/shell/exec", map[string]any{"id": "s3", "command": "sleep 30", "async_mode": true})),
	}
	as("alice", "/v1/shell/kill", map[string]any{"id": "s3"})

	r := ts.do(t, http.MethodGet, sandboxspec.CommandsPath, nil)
	var got sandboxspec.CommandLog
	if err := json.Unmarshal(r.Data, &got); err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET commands: %d %v: %s", r.Status, err, r.Body)
	}
	byID := map[string]sandboxspec.CommandRecord{}
	for i, rec := range got.Records {
		byID[rec.CommandID] = rec
		if rec.Seq != uint64(i+1) || rec.StartedAt.IsZero() || rec.DurationMS < 0 {
			t.Errorf("record %d: %+v", i, rec)
		}
	}
	if len(got.Records) != len(ids) {
		t.Fatalf("%d records for %d commands: %+v", len(got.Records), len(ids), got.Records)
	}
	for _, tc := range []struct {
		name, who, status, session string
		code                       int
		output                     int64
		minMS                      int64
	}{
		{"ok", "alice", statusCompleted, "s1", 0, 5, 0},
		{"fail", "alice", statusCompleted, "s1", 3, 5, 0},
		{"hard", "bob", statusHardTimeout, "", 137, 0, 250},
		{"bash", "capability:alice", statusCompleted, "", 0, 5000, 0}, // over MaxOutput: counted whole
		{"long", "", statusCompleted, "s2", 0, 3001, 0},
		{"killed", "alice", statusTerminated, "s3", 137, 0, 0},
	} {
		rec, found := byID[ids[tc.name]]
		if !found {
			t.Errorf("%s: no record of command %s", tc.name, ids[tc.name])
			continue
		}
		if rec.Who != tc.who || rec.Status != tc.status || rec.ExitCode != tc.code || rec.OutputBytes != tc.output ||
			rec.DurationMS < tc.minMS || tc.session != "" && rec.SessionID != tc.session || rec.SessionID == "" {
			t.Errorf("%s: %+v; want who %q status %s exit %d output %d, at least %d ms, session %q",
				tc.name, rec, tc.who, tc.status, tc.code, tc.output, tc.minMS, tc.session)
		}
	}
	long := byID[ids["long"]]
	if len(long.Command) != sandboxspec.MaxRecordedCommand || long.CommandBytes != len(longCmd) || !strings.HasPrefix(longCmd, long.Command) {
		t.Errorf("long command kept %d of %d bytes (reported %d)", len(long.Command), len(longCmd), long.CommandBytes)
	}

	// The log carries the same records, one line each, without output or the command text.
	eventually(t, 5*time.Second, "a log line per command", func() bool {
		return strings.Count(logs.String(), `"msg":"command ended"`) == len(ids)
	})
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"command ended"`) {
			continue
		}
		var rec sandboxspec.CommandRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line: %v: %s", err, line)
		}
		if want := byID[rec.CommandID]; rec.Who != want.Who || rec.ExitCode != want.ExitCode || rec.Status != want.Status || rec.Seq != want.Seq {
			t.Errorf("log line %s disagrees with the record %+v", line, want)
		}
		// Neither output nor the command text: "printf %s%s hel lo" prints
		// hello, and its text is in the ring only.
		if strings.Contains(line, "hello") || strings.Contains(line, "oops") || strings.Contains(line, "hel lo") ||
			strings.Contains(line, "xxxxxxxx") || rec.Command != "" {
			t.Errorf("log line carries output or the command's text: %s", line)
		}
	}

	limited := ts.do(t, http.MethodGet, sandboxspec.CommandsPath+"?limit=2", nil)
	var two sandboxspec.CommandLog
	if err := json.Unmarshal(limited.Data, &two); err != nil || len(two.Records) != 2 || two.Records[1].Seq != uint64(len(ids)) {
		t.Fatalf("limit=2: %v %s", err, limited.Body)
	}
	for _, bad := range []string{"-1", "x"} {
		if r := ts.do(t, http.MethodGet, sandboxspec.CommandsPath+"?limit="+bad, nil); r.Status != http.StatusBadRequest || r.Success {
			t.Errorf("limit=%s: %d %s", bad, r.Status, r.Body)
		}
	}
}
