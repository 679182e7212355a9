package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/testutil"
)

// sseEvent is one event as a client parses it.
type sseEvent struct {
	id, typ string
	data    events.Event
}

// sseStream reads the events of one stream; comments are counted.
type sseStream struct {
	resp     *http.Response
	sc       *bufio.Scanner
	comments int
}

func openStream(t *testing.T, url, key string, hdr ...string) *sseStream {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s %s", url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next event, or ok=false at the end of the stream.
func (s *sseStream) next(t *testing.T) (ev sseEvent, ok bool) {
	t.Helper()
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.typ != "" {
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
			s.comments++
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	return ev, false
}

// all reads the stream to its end.
func (s *sseStream) all(t *testing.T) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev, ok := s.next(t)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

func typesOf(es []sseEvent) string {
	var s []string
	for _, e := range es {
		s = append(s, e.typ)
	}
	return strings.Join(s, ",")
}

func newEventsRouter(t *testing.T) (*Router, *events.Bus, *httptest.Server) {
	t.Helper()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	bus, err := events.New(rdb, events.Config{Channel: "t:ev", RecentKey: "t:ev:recent", Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go bus.Run(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := bus.Ready(wctx); err != nil {
		t.Fatal(err)
	}
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	rt := New(Deps{Pool: down, Aliases: down, Auth: testAuth(t), Events: bus})
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	return rt, bus, srv
}

// A thread's stream replays its recent events, then follows live ones, and
// never shows another user's (same thread name) or another thread's; with
// until=ready it ends at ready, at once when the replay ends there, and a
// reconnect with Last-Event-ID gets only what came after.
func TestThreadEventsStream(t *testing.T) {
	t.Parallel()
	_, bus, srv := newEventsRouter(t)
	ctx := context.Background()
	bus.Publish(ctx, events.Event{Type: events.Queued, User: "alice", Thread: "t", SandboxID: "s1"})
	bus.Publish(ctx, events.Event{Type: events.Starting, User: "ops", Thread: "t", SandboxID: "s2"})
	bus.Publish(ctx, events.Event{Type: events.Starting, User: "alice", Thread: "other", SandboxID: "s3"})

	url := srv.URL + "/threads/t/sandbox/events"
	s := openStream(t, url+"?until=ready", "alice-key")
	if ev, ok := s.next(t); !ok || ev.typ != "queued" || ev.data.SandboxID != "s1" || ev.id == "" {
		t.Fatalf("replayed %+v (%v), want alice's queued", ev, ok)
	}
	bus.Publish(ctx, events.Event{Type: events.Ready, User: "ops", Thread: "t", SandboxID: "s2"})
	bus.Publish(ctx, events.Event{Type: events.Pulling, User: "alice", Thread: "t", SandboxID: "s1", Bytes: 5, Total: 10})
	bus.Publish(ctx, events.Event{Type: events.Ready, User: "alice", Thread: "t", SandboxID: "s1"})
	rest := s.all(t) // ends at ready
	if typesOf(rest) != "pulling,ready" || rest[0].data.Bytes != 5 || rest[0].data.Total != 10 || rest[1].data.User != "alice" {
		t.Fatalf("live events %+v, want alice's pulling (5 of 10) and ready", rest)
	}

	again := openStream(t, url+"?until=ready", "alice-key").all(t)
	if typesOf(again) != "queued,pulling,ready" {
		t.Fatalf("replay after ready: %s", typesOf(again))
	}
	after := openStream(t, url+"?until=ready", "alice-key", "Last-Event-ID", again[1].id).all(t)
	if typesOf(after) != "ready" {
		t.Fatalf("after Last-Event-ID of pulling: %s", typesOf(after))
	}

	// ops (an admin) sees its own user's thread t only.
	theirs := openStream(t, url+"?until=ready", "ops-key").all(t)
	if typesOf(theirs) != "starting,ready" || theirs[0].data.SandboxID != "s2" {
		t.Fatalf("ops saw %+v", theirs)
	}
}

// Drain ends the open streams (http.Server.Shutdown would wait for them);
// a quiet stream carries heartbeats.
func TestThreadEventsEndOnDrainAndBeat(t *testing.T) {
	t.Parallel()
	rt, _, srv := newEventsRouter(t)
	rt.streams.heartbeat = 20 * time.Millisecond
	s := openStream(t, srv.URL+"/threads/t/sandbox/events", "alice-key")
	time.Sleep(100 * time.Millisecond)
	ended := make(chan []sseEvent, 1)
	go func() { ended <- s.all(t) }()
	rt.Drain()
	select {
	case got := <-ended:
		if len(got) != 0 || s.comments == 0 {
			t.Fatalf("events %+v, %d heartbeats; want none and some", got, s.comments)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("drain left the stream open")
	}
}

func TestThreadEventsRefusals(t *testing.T) {
	t.Parallel()
	_, _, srv := newEventsRouter(t)
	cases := []struct {
		path, key string
		status    int
		code      string
	}{
		{"/threads/t/sandbox/events", "", 401, "unauthorized"},
		{"/threads/t/sandbox/events", "prom-key", 403, "forbidden"},
		{"/threads/t/sandbox/events?until=forever", "alice-key", 400, "bad_request"},
		{"/threads/bad%20thread/sandbox/events", "alice-key", 400, "bad_request"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest("GET", srv.URL+c.path, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body api.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.status || body.Error.Code != c.code {
			t.Errorf("%s (%s): %d %s, want %d %s", c.path, c.key, resp.StatusCode, body.Error.Code, c.status, c.code)
		}
	}
}

// A failed create's event says what the client is told, never the cause.
func TestClientReasonIsTheTablesAnswer(t *testing.T) {
	t.Parallel()
	got := ClientReason(fmt.Errorf("%w: start /var/lib/sandgate/x: exit 1", pool.ErrCreate))
	if got != "sandbox_start_failed: the sandbox failed to start" {
		t.Fatalf("ClientReason = %q", got)
	}
}
