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
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/statedb"
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
	rt, bus, srv, _ := replicaOn(t, rdb, "r1")
	return rt, bus, srv
}

// replicaOn is one gateway replica's router and event bus on rdb; kill
// ends both, as a replica's death would.
func replicaOn(t *testing.T, rdb redis.UniversalClient, name string) (*Router, *events.Bus, *httptest.Server, func()) {
	t.Helper()
	bus, err := events.New(rdb, events.Config{Stream: "t{fleet}:events", Replica: name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); bus.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := bus.Ready(wctx); err != nil {
		t.Fatal(err)
	}
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	rt := New(Deps{Pool: down, Aliases: down, Auth: testAuth(t), Events: bus})
	srv := httptest.NewServer(rt)
	kill := func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	}
	t.Cleanup(kill)
	return rt, bus, srv, sync.OnceFunc(kill)
}

// A client follows a thread on replica A; A dies while events go on; the
// client reconnects to replica B with the last id it saw and gets exactly
// the events it missed (published by A before it died and by B after),
// then live ones. ?since= an RFC 3339 time replays from then.
func TestThreadEventsReconnectToAnotherReplica(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	_, busA, srvA, killA := replicaOn(t, rdb, "a")
	_, busB, srvB, _ := replicaOn(t, rdb, "b")
	ctx := context.Background()
	path := "/threads/t/sandbox/events"

	s := openStream(t, srvA.URL+path, "alice-key")
	busA.Publish(ctx, events.Event{Type: events.Starting, User: "alice", Thread: "t", SandboxID: "s1"})
	first, ok := s.next(t)
	if !ok || first.typ != "starting" || first.id == "" {
		t.Fatalf("first live event %+v (%v)", first, ok)
	}
	// mark lies strictly between the first event's millisecond and the next's.
	time.Sleep(5 * time.Millisecond)
	mark := time.Now()
	time.Sleep(5 * time.Millisecond)
	// Missed by the client: published while its stream was (or was about
	// to be) cut, one by A, one by B, one of another user's.
	busA.Publish(ctx, events.Event{Type: events.Ready, User: "alice", Thread: "t", SandboxID: "s1", Cause: "cold"})
	killA()
	busB.Publish(ctx, events.Event{Type: events.Starting, User: "bob", Thread: "t", SandboxID: "b1"})
	busB.Publish(ctx, events.Event{Type: events.Destroyed, User: "alice", Thread: "t", SandboxID: "s1", Cause: "idle"})

	for _, tc := range []struct {
		name string
		url  string
		hdr  []string
	}{
		{"Last-Event-ID", srvB.URL + path, []string{"Last-Event-ID", first.id}},
		{"since id", srvB.URL + path + "?since=" + first.id, nil},
		{"since time", srvB.URL + path + "?since=" + mark.UTC().Format(time.RFC3339Nano), nil},
		// An EventSource reconnects to the URL it opened: the header wins.
		{"header over since", srvB.URL + path + "?since=1-0", []string{"Last-Event-ID", first.id}},
	} {
		again := openStream(t, tc.url, "alice-key", tc.hdr...)
		var got []sseEvent
		for range 2 {
			ev, ok := again.next(t)
			if !ok {
				t.Fatalf("%s: stream ended after %+v", tc.name, got)
			}
			got = append(got, ev)
		}
		if typesOf(got) != "ready,destroyed" || got[0].data.Replica != "a" || got[0].data.Cause != "cold" ||
			got[1].data.Replica != "b" || got[1].data.Cause != "idle" || got[0].id == first.id {
			t.Fatalf("%s: replayed %+v, want A's ready then B's destroyed", tc.name, got)
		}
		busB.Publish(ctx, events.Event{Type: events.Queued, User: "alice", Thread: "t", SandboxID: tc.name})
		if ev, ok := again.next(t); !ok || ev.typ != "queued" || ev.data.SandboxID != tc.name {
			t.Fatalf("%s: live event after the replay %+v (%v)", tc.name, ev, ok)
		}
		again.resp.Body.Close()
		// The next case's replay must not see this case's live event.
		newest, err := rdb.XRevRangeN(ctx, "t{fleet}:events", "+", "-", 1).Result()
		if err != nil || len(newest) != 1 {
			t.Fatalf("newest event: %v", err)
		}
		if err := rdb.XDel(ctx, "t{fleet}:events", newest[0].ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
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
		{"/threads/t/sandbox/events?since=yesterday", "alice-key", 400, "bad_request"},
		{"/threads/t/sandbox/events?since=1733500000000", "alice-key", 400, "bad_request"},
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

// The status page's stream resumes too: its EventSource reconnects (to any
// replica) with the id of the last event it showed and gets exactly the
// ones after it, then live ones; without one it starts at now.
func TestStatusEventsResumeByLastEventID(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	bus, err := events.New(rdb, events.Config{Stream: "t{fleet}:events", Replica: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); bus.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := bus.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Events: bus,
		Status: Status{Source: statedb.NewStore(rdb, "")}}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })

	bus.Publish(ctx, events.Event{Type: events.Ready, User: "u", Thread: "old", SandboxID: "s0"})
	// "Now" is what the replica's reader delivered: wait until it has s0.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		latest, _ := bus.Recent(ctx, 1)
		now, _ := bus.Now(ctx)
		if len(latest) == 1 && now.String() == latest[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader never delivered s0")
		}
	}
	live := openStream(t, srv.URL+"/status/events", "")
	bus.Publish(ctx, events.Event{Type: events.Ready, User: "u", Thread: "t", SandboxID: "s1"})
	first, ok := live.next(t)
	if !ok || first.typ != "lifecycle" || first.data.SandboxID != "s1" || first.id == "" {
		t.Fatalf("first event from now %+v (%v), want s1's, not the older s0's", first, ok)
	}
	live.resp.Body.Close()
	bus.Publish(ctx, events.Event{Type: events.Destroyed, User: "u", Thread: "t", SandboxID: "s1", Cause: "idle"})

	again := openStream(t, srv.URL+"/status/events", "", "Last-Event-ID", first.id)
	if ev, ok := again.next(t); !ok || ev.data.Type != events.Destroyed || ev.data.Cause != "idle" {
		t.Fatalf("after reconnecting: %+v (%v), want the missed destroyed", ev, ok)
	}
	bus.Publish(ctx, events.Event{Type: events.Queued, User: "u", Thread: "t", SandboxID: "s2"})
	if ev, ok := again.next(t); !ok || ev.data.SandboxID != "s2" {
		t.Fatalf("live after the replay: %+v (%v)", ev, ok)
	}
}
