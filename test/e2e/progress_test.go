package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/testutil"
)

// Provisioning progress (GET /threads/{t}/sandbox/events) through real
// gateway processes: the process backend at a hard cap of one, and the
// docker backend pulling from a registry the test runs.

// progressEvent is one SSE event of the stream.
type progressEvent struct {
	Type      string `json:"type"`
	SandboxID string `json:"sandbox_id"`
	User      string `json:"user"`
	Thread    string `json:"thread"`
	Cause     string `json:"cause"`
	From      string `json:"from"`
	Bytes     int64  `json:"bytes"`
	Total     int64  `json:"total"`
	Host      string `json:"host"`
	Count     int64  `json:"count"`
}

// progressStream is an open stream; its events arrive on events, which is
// closed when the stream ends.
type progressStream struct {
	events chan progressEvent
	body   io.Closer
}

func watchProgress(t *testing.T, base, thread, query string) *progressStream {
	t.Helper()
	url := base + "/threads/" + thread + "/sandbox/events" + query
	resp, err := clientFor(url).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	s := &progressStream{events: make(chan progressEvent, 1024), body: resp.Body}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var typ string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				var e progressEvent
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e) != nil || e.Type != typ {
					e = progressEvent{Type: "unparsable: " + line}
				}
				s.events <- e
			}
		}
	}()
	return s
}

// until reads events up to and including the first of type typ.
func (s *progressStream) until(t *testing.T, typ string, within time.Duration) []progressEvent {
	t.Helper()
	got, ended := s.read(t, func(e progressEvent) bool { return e.Type == typ }, within)
	if ended {
		t.Fatalf("stream ended before %s; got %s", typ, typesOfProgress(got))
	}
	return got
}

// rest reads the stream to its end.
func (s *progressStream) rest(t *testing.T, within time.Duration) []progressEvent {
	t.Helper()
	got, _ := s.read(t, func(progressEvent) bool { return false }, within)
	return got
}

// read reads events until stop says so (ended false) or the stream ends
// (ended true); past within the test fails.
func (s *progressStream) read(t *testing.T, stop func(progressEvent) bool, within time.Duration) (got []progressEvent, ended bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				return got, true
			}
			got = append(got, e)
			if stop(e) {
				return got, false
			}
		case <-deadline:
			t.Fatalf("no end within %s; got %s", within, typesOfProgress(got))
		}
	}
}

func typesOfProgress(es []progressEvent) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Type
	}
	return strings.Join(s, ",")
}

// A create at a full hard cap is queued, then starts and is ready once the
// one sandbox is released (and evicted for it); ?until=ready ends the
// stream; the evicted thread's stream replays its whole life.
func TestProgressQueuedStartingReady(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--cap-mode", "hard", "--max-sandboxes", "1", "--acquire-timeout", "60s")
	g := f.start()
	if code, body, _ := call(t, "PUT", g.URL+"/threads/q1/sandbox", nil); code != 200 {
		t.Fatalf("PUT q1: %d %s", code, body)
	}
	s := watchProgress(t, g.URL, "q2", "?until=ready")
	put := make(chan int, 1)
	go func() {
		resp, err := clientFor(g.URL).Do(mustRequest("PUT", g.URL+"/threads/q2/sandbox"))
		if err != nil {
			put <- 0
			return
		}
		resp.Body.Close()
		put <- resp.StatusCode
	}()
	queued := s.until(t, "queued", 20*time.Second)
	if typesOfProgress(queued) != "queued" {
		t.Fatalf("before the wait ends: %s", typesOfProgress(queued))
	}
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/q1/sandbox", nil); code != 204 {
		t.Fatalf("release q1: %d %s", code, body)
	}
	rest := s.rest(t, 30*time.Second)
	if typesOfProgress(rest) != "starting,ready" {
		t.Fatalf("after the release: %s, want starting,ready and the end of the stream", typesOfProgress(rest))
	}
	for _, e := range append(queued, rest...) {
		if e.Thread != "q2" || e.User != "default" || e.SandboxID == "" {
			t.Errorf("event %+v is not q2's", e)
		}
	}
	if code := <-put; code != 200 {
		t.Fatalf("PUT q2: %d", code)
	}

	// q1's life, replayed to a client that comes late.
	late := watchProgress(t, g.URL, "q1", "")
	life := late.until(t, "destroyed", 10*time.Second)
	late.body.Close()
	if typesOfProgress(life) != "starting,ready,released,destroyed" || life[3].Cause != "evicted" {
		t.Fatalf("q1's replay: %+v", life)
	}

	// A draining gateway ends the open streams rather than wait
	// shutdown_timeout (30 s) for their clients.
	open := watchProgress(t, g.URL, "q3", "")
	began := time.Now()
	g.stop()
	open.rest(t, 5*time.Second)
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("stop with an open stream took %s", took)
	}
}

func mustRequest(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// The docker backend pulls the sandbox image from a registry the test runs
// (Debian's docker-registry: no image is pulled to run it). Two threads
// created at once share one pull, and each stream shows pulling before
// ready; the download is counted in bytes of a known total.
func TestProgressDockerPulling(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	api := testutil.DockerClient(t)
	base := testutil.SandboxImage(t)
	addr := testutil.StartRegistry(t)
	ref := fmt.Sprintf("%s/sandgate-progress:%s", addr, randomHex(6))
	t.Cleanup(func() { // after the containers using it are gone (registered first)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = api.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	d := newDockerEnv(t)
	g := d.fleet("--image", ref, "--docker-pull-policy", "always").start()
	// The registry is empty yet: the start-up pull fails, so the creates
	// below are the ones that pull.
	waitLog(t, g, "sandbox image could not be pulled", 30*time.Second)
	pushImage(t, api, base, ref)

	threads := []string{"p1", "p2"}
	streams := map[string]*progressStream{}
	for _, th := range threads {
		streams[th] = watchProgress(t, g.URL, th, "?until=ready")
	}
	var wg sync.WaitGroup
	for _, th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := clientFor(g.URL).Do(mustRequest("PUT", g.URL+"/threads/"+th+"/sandbox"))
			if err != nil {
				t.Errorf("PUT %s: %v", th, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("PUT %s: %d", th, resp.StatusCode)
			}
		}()
	}
	counted := false
	for _, th := range threads {
		got := streams[th].rest(t, 2*time.Minute)
		ts := typesOfProgress(got)
		if len(got) < 3 || got[0].Type != "starting" || got[len(got)-1].Type != "ready" {
			t.Fatalf("%s: %s, want starting, pulling..., ready", th, ts)
		}
		for _, e := range got[1 : len(got)-1] {
			if e.Type != "pulling" {
				t.Fatalf("%s: %s, want only pulling between starting and ready", th, ts)
			}
			if e.Bytes > e.Total {
				t.Errorf("%s: pulled %d of %d", th, e.Bytes, e.Total)
			}
		}
		if last := got[len(got)-2]; last.Total > 0 && last.Bytes == last.Total {
			counted = true
		}
		t.Logf("%s: %s (last pull event %d of %d bytes)", th, ts, got[len(got)-2].Bytes, got[len(got)-2].Total)
	}
	wg.Wait()
	if !counted {
		t.Fatal("no stream counted the download in bytes of a known total")
	}
}

// pushImage builds ref FROM base with one layer of random bytes (so the
// engine has it nowhere but in the registry once the local copy is
// removed: base's layers would be "Already exists"), pushes it and removes
// the local copy.
func pushImage(t *testing.T, api *client.Client, base, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	blob := make([]byte, 8<<20)
	_, _ = rand.Read(blob)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"Dockerfile", []byte("FROM " + base + "\nCOPY blob /blob\n")}, {"blob", blob}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := api.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{ref}, Remove: true, ForceRemove: true,
		Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("build %s: %v", ref, err)
	}
	err = engineStream(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("build %s: %v", ref, err)
	}
	rc, err := api.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: base64.URLEncoding.EncodeToString([]byte("{}"))})
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	err = engineStream(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	if _, err := api.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
		t.Fatalf("remove the local %s: %v", ref, err)
	}
}

// engineStream reads an engine JSON stream (build, push) to its end and
// returns the error it reports.
func engineStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// waitLog waits for a line of g's log containing s.
func waitLog(t *testing.T, g *gateway, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(g.logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("gateway never logged %q:\n%s", s, tail(g.logs.String(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
