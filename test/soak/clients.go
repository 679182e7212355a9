package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Operations a client runs, and how often (per mille).
const (
	opExec    = "exec"
	opWrite   = "write"
	opRead    = "read" // the read-back after each acknowledged write
	opRelease = "release"
	opDestroy = "destroy"
)

var opMix = []struct {
	op     string
	weight int
}{{opExec, 550}, {opWrite, 400}, {opRelease, 40}, {opDestroy, 10}}

// requestTimeout bounds one request: far above any healthy answer here.
const requestTimeout = 60 * time.Second

// result is one request as the client saw it.
type result struct {
	op       string
	thread   int
	client   int
	replica  int
	start    time.Time
	end      time.Time
	status   string // "200", "503 state_unavailable", "conn reset", ...
	ok       bool
	pid      int  // exec: the sandbox server that ran the command ($PPID)
	rerouted bool // the first replica refused the connection; sent to another
}

// fileState is what one client wrote to its file in one thread: the last
// acknowledged content, and contents sent after it whose outcome is unknown
// (the request failed; the sandbox may or may not have written them).
type fileState struct {
	acked     string
	uncertain []string
}

type fileKey struct{ client, thread int }

// client runs operations in a loop until its context ends.
type client struct {
	id      int
	c       *cluster
	cfg     config
	rng     *rand.Rand
	seq     int
	results []result
	// cutDestroys are destroys the end of the run cut short: no result,
	// but the gateway may finish them, so they explain a sandbox that
	// disappears at the end.
	cutDestroys []result
	files       map[int]*fileState // by thread
	// mismatches are read-backs that returned other content than the write
	// just acknowledged: lost data.
	mismatches []string
}

type clientSet struct {
	all  []*client
	wg   sync.WaitGroup
	done atomic.Int64 // requests finished, for progress
	fail atomic.Int64
}

func startClients(ctx context.Context, c *cluster, cfg config) *clientSet {
	s := &clientSet{}
	for i := range cfg.Clients {
		cl := &client{id: i, c: c, cfg: cfg, rng: rand.New(rand.NewPCG(uint64(i), 0x50a4)), files: map[int]*fileState{}}
		s.all = append(s.all, cl)
		s.wg.Add(1)
		go func() { defer s.wg.Done(); cl.loop(ctx, s) }()
	}
	return s
}

// wait returns every result once all clients have stopped.
func (s *clientSet) wait() []result {
	s.wg.Wait()
	var out []result
	for _, cl := range s.all {
		out = append(out, cl.results...)
	}
	return out
}

func (s *clientSet) cutDestroys() []result {
	var out []result
	for _, cl := range s.all {
		out = append(out, cl.cutDestroys...)
	}
	return out
}

func (s *clientSet) files() map[fileKey]*fileState {
	out := map[fileKey]*fileState{}
	for _, cl := range s.all {
		for th, f := range cl.files {
			out[fileKey{cl.id, th}] = f
		}
	}
	return out
}

func (s *clientSet) mismatches() []string {
	var out []string
	for _, cl := range s.all {
		out = append(out, cl.mismatches...)
	}
	return out
}

func threadName(i int) string { return fmt.Sprintf("soak-%03d", i) }

func (cl *client) loop(ctx context.Context, s *clientSet) {
	// Spread the first requests over one think period instead of a stampede.
	if !sleep(ctx, time.Duration(cl.rng.Int64N(int64(cl.cfg.ThinkMax)))) {
		return
	}
	for {
		th := cl.rng.IntN(cl.cfg.Threads)
		n := len(cl.results)
		cl.step(ctx, th)
		if ctx.Err() != nil {
			// A request cut short by the end of the run is not a result.
			for _, r := range cl.results[n:] {
				if r.op == opDestroy {
					cl.cutDestroys = append(cl.cutDestroys, r)
				}
			}
			cl.results = cl.results[:n]
			return
		}
		for _, r := range cl.results[n:] {
			s.done.Add(1)
			if !r.ok {
				s.fail.Add(1)
			}
		}
		think := cl.cfg.ThinkMin + time.Duration(cl.rng.Int64N(int64(cl.cfg.ThinkMax-cl.cfg.ThinkMin)+1))
		if !sleep(ctx, think) {
			return
		}
	}
}

func (cl *client) pick() string {
	w := cl.rng.IntN(1000)
	for _, m := range opMix {
		if w < m.weight {
			return m.op
		}
		w -= m.weight
	}
	return opExec
}

func (cl *client) step(ctx context.Context, th int) {
	cl.seq++
	thread := threadName(th)
	switch op := cl.pick(); op {
	case opExec:
		tok := fmt.Sprintf("soak-%d-%d", cl.id, cl.seq)
		r, body := cl.send(ctx, op, th, "POST", "/threads/"+thread+"/v1/shell/exec", map[string]any{"command": "echo " + tok + " $PPID"})
		if r.ok {
			out, _ := dataField(body, "output")
			rest, found := strings.CutPrefix(strings.TrimSpace(out), tok+" ")
			pid, err := strconv.Atoi(rest)
			if !found || err != nil {
				r.ok, r.status = false, "200 wrong_output"
			}
			r.pid = pid
		}
		cl.results = append(cl.results, r)
	case opWrite:
		file := fmt.Sprintf("/mnt/user-data/workspace/soak/c%03d.txt", cl.id)
		content := fmt.Sprintf("client %d seq %d", cl.id, cl.seq)
		f := cl.files[th]
		if f == nil {
			f = &fileState{}
			cl.files[th] = f
		}
		r, _ := cl.send(ctx, op, th, "POST", "/threads/"+thread+"/v1/file/write", map[string]any{"file": file, "content": content})
		cl.results = append(cl.results, r)
		if !r.ok {
			f.uncertain = append(f.uncertain, content)
			return
		}
		f.acked, f.uncertain = content, nil
		r, body := cl.send(ctx, opRead, th, "POST", "/threads/"+thread+"/v1/file/read", map[string]any{"file": file})
		if r.ok {
			if got, _ := dataField(body, "content"); got != content {
				r.ok, r.status = false, "200 wrong_content"
				cl.mismatches = append(cl.mismatches, fmt.Sprintf("%s %s: read back %q after writing %q", thread, file, got, content))
			}
		}
		cl.results = append(cl.results, r)
	case opRelease, opDestroy:
		path := "/threads/" + thread + "/sandbox"
		if op == opDestroy {
			path += "?destroy=true"
		}
		r, _ := cl.send(ctx, op, th, "DELETE", path, nil)
		cl.results = append(cl.results, r)
	}
}

// send makes one request through a random replica. A refused connection
// (the replica is down) goes once to another replica, as a load balancer
// would: nothing was sent, so it is safe for any method.
func (cl *client) send(ctx context.Context, op string, th int, method, path string, body any) (result, []byte) {
	n := len(cl.c.replicas)
	idx := cl.rng.IntN(n)
	r := result{op: op, thread: th, client: cl.id, replica: idx, start: time.Now()}
	code, data, err := cl.c.do(ctx, idx, method, path, body)
	if errors.Is(err, syscall.ECONNREFUSED) && n > 1 {
		r.rerouted = true
		r.replica = (idx + 1 + cl.rng.IntN(n-1)) % n
		code, data, err = cl.c.do(ctx, r.replica, method, path, body)
	}
	r.end = time.Now()
	switch {
	case err != nil:
		r.status = "conn " + connErrorKind(err)
	case code/100 == 2 || (code == 404 && (op == opRelease || op == opDestroy)):
		r.status, r.ok = strconv.Itoa(code), true
		if code == 200 && !successEnvelope(data) {
			r.status, r.ok = "200 success_false", false
		}
	default:
		r.status = strconv.Itoa(code) + " " + errorCode(data)
	}
	return r, data
}

// do sends one request to replica idx.
func (c *cluster) do(ctx context.Context, idx int, method, path string, body any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.replicas[idx].url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, data, nil
}

func connErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "error"
}

// errorCode is the gateway's error code, or "sandbox" for the sandbox
// API's own error envelope, or "-" for a body that is neither.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
		Success *bool `json:"success"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "-"
	}
	if e.Error.Code != "" {
		return e.Error.Code
	}
	if e.Success != nil {
		return "sandbox"
	}
	return "-"
}

func successEnvelope(body []byte) bool {
	var e struct {
		Success bool `json:"success"`
	}
	return json.Unmarshal(body, &e) == nil && e.Success
}

// dataField returns the string field name of the envelope's data.
func dataField(body []byte, name string) (string, bool) {
	var e struct {
		Data map[string]any `json:"data"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "", false
	}
	s, ok := e.Data[name].(string)
	return s, ok
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
