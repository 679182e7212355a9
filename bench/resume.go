package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

func init() { register("resume", resumeSuite) }

const (
	figResumeKilledP50 = "reattach.killed.p50_ms"
	figResumeKilledP99 = "reattach.killed.p99_ms"
	figResumeLiveP99   = "reattach.live.p99_ms"
	goalResumeP99MS    = 100.0 // issue 36: a stream resumed on another replica
	// resumeLines is what the streamed command prints, a line per 10 ms;
	// the stream is cut after resumeCutAt of them.
	resumeLines = 40
	resumeCutAt = 3
)

// resumeCommand prints the numbered lines the resumed stream must carry.
var resumeCommand = fmt.Sprintf(`for i in $(seq 1 %d); do echo line $i; sleep 0.01; done`, resumeLines)

// streamClient opens a connection per stream: a client reattaching after
// a failure reconnects, it has no pooled connection to the other replica.
var streamClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// resumeSuite measures how long a client whose exec stream broke waits,
// from sending the resume (a re-sent exec with Last-Event-ID) to the first
// event: after the replica it streamed through was SIGKILLed (to the other
// replica, which has no cached route to the sandbox), and after its own
// connection dropped (to a live replica, cached route).
func resumeSuite(ctx context.Context) (Result, error) {
	began := time.Now()
	env, err := startSuiteEnv(ctx, "resume")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	dataDir := filepath.Join(env.tmp, "data")
	gateway := func(name string) (*service, string, error) {
		gw, addr, err := startGateway(ctx, env.bin, env.redisAddr, dataDir, filepath.Join(env.tmp, name+".log"))
		return gw, "http://" + addr, err
	}
	b, bBase, err := gateway("survivor")
	if err != nil {
		return Result{}, err
	}
	env.cleanup.push(func(context.Context) { b.stop(syscall.SIGTERM, 10*time.Second) })
	var threads []string // destroyed as the runs go; again at cleanup, for a run that failed
	env.cleanup.push(func(ctx context.Context) { destroyThreads(ctx, bBase, threads) })

	var killed, live []time.Duration
	for n := range opts.ResumeRuns {
		// a fresh replica a per run, since each run SIGKILLs it
		a, aBase, err := gateway(fmt.Sprintf("victim-%d", n))
		if err != nil {
			return Result{}, err
		}
		thread := fmt.Sprintf("resume-%d", n)
		threads = append(threads, thread)
		if _, err := call(ctx, http.MethodPost, aBase+"/threads/"+thread+"/v1/shell/exec", `{"command":"true"}`,
			[][2]string{{"Content-Type", "application/json"}}); err != nil {
			a.stop(syscall.SIGKILL, 0)
			return Result{}, err
		}
		d, err := resumeOnce(ctx, aBase, bBase, thread, func() { a.stop(syscall.SIGKILL, 0) })
		a.stop(syscall.SIGKILL, 0) // already dead unless resumeOnce failed first
		if err != nil {
			return Result{}, fmt.Errorf("after a SIGKILL: %w", err)
		}
		killed = append(killed, d)
		if d, err = resumeOnce(ctx, bBase, bBase, thread, nil); err != nil {
			return Result{}, fmt.Errorf("after a dropped connection: %w", err)
		}
		live = append(live, d)
		destroyThreads(ctx, bBase, []string{thread}) // keep the machine's sandbox count flat
	}

	ks, ls := summarize(killed), summarize(live)
	return Result{
		Title:   "Resuming an exec stream: reattach after a replica's SIGKILL",
		Columns: statsColumns,
		Rows: [][]string{
			statsRow("replica SIGKILLed mid-stream: resume on the other replica (no cached route), to the first event", ks),
			statsRow("client connection dropped: resume on the same live replica (cached route), to the first event", ls),
		},
		Figures: map[string]float64{figResumeKilledP50: msF(ks.P50), figResumeKilledP99: msF(ks.P99), figResumeLiveP99: msF(ls.P99)},
		Notes: []string{
			fmt.Sprintf("2 gateways (process backend) on one real redis-server and one data directory. Each run streams `%s` "+
				"(SSE `POST /threads/{t}/v1/shell/exec`) through a fresh replica a, SIGKILLs a after %d lines, reads what a had "+
				"sent, then re-sends the exec to replica b with the last event's id as Last-Event-ID; the row times that request "+
				"from its start (a new TCP connection) to the first event. The second row drops the client's connection to b "+
				"instead and resumes on b. Every resumed stream is checked to carry all %d lines exactly once.",
				resumeCommand, resumeCutAt, resumeLines),
			"The command runs on in the sandbox throughout: the sandbox process is no child of the replica's process group, " +
				"and a request that ends does not kill its command. Output is kept within the output cap (head and tail): " +
				"a gap longer than that resumes with the truncation marker in place of the bytes no longer kept.",
			fmt.Sprintf("The suite took %s.", time.Since(began).Round(time.Second)),
		},
	}, nil
}

// resumeOnce streams resumeCommand through base, calls cut (nil: drop the
// connection) once resumeCutAt lines arrived, then resumes through other
// with Last-Event-ID and returns the time to the resumed stream's first
// event. The output before and after must be every line once, in order.
func resumeOnce(ctx context.Context, base, other, thread string, cut func()) (time.Duration, error) {
	resp, err := openExecStream(ctx, base, thread, "")
	if err != nil {
		return 0, err
	}
	var before execEvents
	rd := testutil.NewSSEReader(resp.Body)
	if err := before.read(rd, func() bool { return strings.Count(before.output, "\n") >= resumeCutAt }); err != nil {
		resp.Body.Close()
		return 0, fmt.Errorf("stream ended before line %d: %w", resumeCutAt, err)
	}
	if cut == nil {
		cut = func() { resp.Body.Close() }
	}
	cut()
	if err := before.read(rd, nil); err == nil {
		resp.Body.Close()
		return 0, errors.New("the cut stream went on to its result: cut too late")
	}
	resp.Body.Close()

	t0 := time.Now()
	resp, err = openExecStream(ctx, other, thread, before.lastID)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var after execEvents
	rd = testutil.NewSSEReader(resp.Body)
	first, err := rd.Next()
	d := time.Since(t0)
	if err != nil || first.Name != "start" {
		return 0, fmt.Errorf("resumed stream: first event %q: %w", first.Name, err)
	}
	if err := after.read(rd, nil); err != nil {
		return 0, fmt.Errorf("resumed stream ended before its result: %w", err)
	}
	var want strings.Builder
	for i := 1; i <= resumeLines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if before.output+after.output != want.String() {
		return 0, fmt.Errorf("output across the resume is not every line once: %q then %q", before.output, after.output)
	}
	return d, nil
}

func openExecStream(ctx context.Context, base, thread, lastID string) (*http.Response, error) {
	body, _ := json.Marshal(map[string]string{"command": resumeCommand})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/threads/"+thread+"/v1/shell/exec", strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := streamClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("exec stream via %s: status %d", base, resp.StatusCode)
	}
	return resp, nil
}

// execEvents is what a client kept of an exec stream.
type execEvents struct{ output, lastID string }

// read takes events until the result (nil), a read error, or stop says so
// after an output event (nil).
func (s *execEvents) read(rd *testutil.SSEReader, stop func() bool) error {
	for {
		ev, err := rd.Next()
		if err != nil {
			return err
		}
		s.lastID = ev.ID
		switch ev.Name {
		case "output":
			var o struct{ Output string }
			if err := json.Unmarshal([]byte(ev.Data), &o); err != nil {
				return fmt.Errorf("output event %q: %w", ev.Data, err)
			}
			s.output += o.Output
			if stop != nil && stop() {
				return nil
			}
		case "result":
			return nil
		}
	}
}

func goalResume(rs map[string]Result) []string {
	goal := fmt.Sprintf("stream reattach on another replica after a SIGKILL < %g ms p99 (loopback)", goalResumeP99MS)
	v, r, ok := figs(rs, "resume", figResumeKilledP50, figResumeKilledP99)
	if !ok {
		return notMeasured(goal, "resume")
	}
	measured := fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", v[0], v[1])
	why := "a re-sent exec with Last-Event-ID on a replica with no cached route: a new connection, the record read from Redis, " +
		"a new connection to the sandbox, which attaches to the running command and sends the start event"
	return []string{goal, measured, msVerdict(v[1], goalResumeP99MS), why, runLabel(r)}
}
