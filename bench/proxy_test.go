package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

func TestParseWrk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		out     string
		want    wrkResult
		wantErr bool
	}{
		{"summary after wrk's text", "Running 4s test @ http://x\n  1 threads\n" + wrkMarker +
			`{"requests":2000,"duration_us":4000000,"bytes":10,"p50_us":100,"p99_us":900,"p999_us":2000,` +
			`"connect":1,"read":2,"write":3,"status":4,"timeout":5}` + "\n",
			wrkResult{Requests: 2000, DurationUS: 4000000, Bytes: 10, P50US: 100, P99US: 900, P999US: 2000,
				Connect: 1, Read: 2, Write: 3, Status: 4, Timeout: 5}, false},
		{"no summary", "Running 4s test\nRequests/sec: 100\n", wrkResult{}, true},
		{"broken summary", wrkMarker + `{"requests":` + "\n", wrkResult{}, true},
	} {
		got, err := parseWrk(tc.out)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: parseWrk = %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
	r := wrkResult{Requests: 2000, DurationUS: 4000000, Connect: 1, Read: 2, Write: 3, Status: 4, Timeout: 5}
	if r.RPS() != 500 || r.Errors() != 15 || (wrkResult{}).RPS() != 0 {
		t.Errorf("RPS %v, Errors %v; want 500, 15", r.RPS(), r.Errors())
	}
}

func TestLuaQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"GET":               `"GET"`,
		`{"a":"b\c"}`:       `"{\"a\":\"b\\c\"}"`,
		"line\n1":           `"line\0101"`, // decimal, three digits: the 1 stays a character
		"tab\there\x7f\xff": `"tab\009here\127\255"`,
	} {
		if got := luaQuote(in); got != want {
			t.Errorf("luaQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestWrkScriptRunsInWrk runs a rendered script in the real wrk: the
// request it sends and the summary its done() hook prints.
func TestWrkScriptRunsInWrk(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("wrk")
	testutil.Require(t, err == nil, "wrk")
	body := `{"command":"echo \"x\"\n"}`
	var good, bad atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || string(got) != body || r.Header.Get("Accept") != "text/event-stream" {
			bad.Add(1)
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		good.Add(1)
	}))
	t.Cleanup(srv.Close)
	script, err := writeScript(t.TempDir(), "s", wrkScript(http.MethodPost, body, [][2]string{{"Accept", "text/event-stream"}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := wrkRun{script: script, conns: 2, dur: time.Second, timeout: 5 * time.Second}.run(ctx, srv.URL+"/v1/x")
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors() != 0 || bad.Load() != 0 || res.P50US <= 0 || res.P999US < res.P50US ||
		res.DurationUS < 900_000 || good.Load() < res.Requests {
		t.Fatalf("wrk summary %+v; server saw %d good, %d unexpected requests", res, good.Load(), bad.Load())
	}
}

// TestNginxConfigIsValid renders the reference proxy's config and has the
// real nginx check it.
func TestNginxConfigIsValid(t *testing.T) {
	t.Parallel()
	bin, err := lookNginx()
	testutil.Require(t, err == nil, "nginx")
	dir := t.TempDir()
	c := nginxConfig{Dir: dir, Listen: "127.0.0.1:1", Upstream: "127.0.0.1:2", Prefix: "/threads/t/", SSEPath: "v1/shell/exec"}
	conf, err := renderNginx(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"keepalive 256;", "proxy_pass http://sandbox/;", "location = /threads/t/v1/shell/exec {",
		"proxy_pass http://sandbox/v1/shell/exec;", "proxy_buffering off;", `proxy_set_header Connection "";`,
		"server 127.0.0.1:2;", "listen 127.0.0.1:1;", "worker_processes 2;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), bin, "-t", "-q", "-p", dir, "-c", path,
		"-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n%s", err, out, conf)
	}

	for _, bad := range []nginxConfig{{Prefix: "/threads/t"}, {Prefix: "threads/t/"}, {Prefix: "/t/", SSEPath: "/v1/x"}} {
		if _, err := renderNginx(bad); err == nil {
			t.Errorf("renderNginx(%+v) accepted a bad prefix or SSE path", bad)
		}
	}
}

func TestCombineRounds(t *testing.T) {
	t.Parallel()
	rounds := []wrkResult{
		{Requests: 1000, DurationUS: 1e6, Bytes: 10, P50US: 100, P99US: 900, P999US: 5000, Read: 1, CPUUS: 100_000},
		{Requests: 3000, DurationUS: 1e6, Bytes: 30, P50US: 300, P99US: 100_000, P999US: 200_000, Status: 2},
		{Requests: 2000, DurationUS: 1e6, Bytes: 20, P50US: 200, P99US: 700, P999US: 3000, CPUUS: 300_000},
		{Requests: 2000, DurationUS: 1e6, Bytes: 20, P50US: 200, P99US: 800, P999US: 4000, Timeout: 3},
	}
	got := combineRounds(rounds)
	want := wrkResult{Requests: 8000, DurationUS: 4e6, Bytes: 80, P50US: 200, P99US: 850, P999US: 4500, Read: 1, Status: 2, Timeout: 3,
		CPUUS: 400_000}
	if got != want || got.RPS() != 2000 || got.Errors() != 6 || got.CPUPerRequestUS() != 50 {
		t.Errorf("combineRounds = %+v (RPS %v), want %+v", got, got.RPS(), want)
	}
	if one := combineRounds(rounds[1:2]); one != rounds[1] {
		t.Errorf("combineRounds of one run = %+v, want it unchanged", one)
	}
	if got := median([]int64{5, 1, 3}); got != 3 {
		t.Errorf("median odd = %d, want 3", got)
	}
}
