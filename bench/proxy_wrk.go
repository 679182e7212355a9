package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// wrkMarker starts the one line the Lua done() hook prints: the numbers
// come from wrk's own summary objects, nothing is scraped from its text.
const wrkMarker = "SANDGATE-WRK "

// wrkDone is the Lua done() hook. Latencies are wrk's microseconds;
// errors.status counts responses with status >= 400.
const wrkDone = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("` + wrkMarker + `{\"requests\":%d,\"duration_us\":%d,\"bytes\":%d," ..
    "\"p50_us\":%d,\"p99_us\":%d,\"p999_us\":%d," ..
    "\"connect\":%d,\"read\":%d,\"write\":%d,\"status\":%d,\"timeout\":%d}\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.connect, e.read, e.write, e.status, e.timeout))
end
`

// wrkResult is one wrk run, as printed by wrkDone.
type wrkResult struct {
	Requests   int64 `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	Bytes      int64 `json:"bytes"`
	P50US      int64 `json:"p50_us"`
	P99US      int64 `json:"p99_us"`
	P999US     int64 `json:"p999_us"`
	Connect    int64 `json:"connect"`
	Read       int64 `json:"read"`
	Write      int64 `json:"write"`
	Status     int64 `json:"status"`
	Timeout    int64 `json:"timeout"`
	// CPUUS is the target process's CPU time during the run, when known
	// (measured by the bench, not printed by wrk).
	CPUUS int64 `json:"-"`
}

// RPS is completed requests per second of the run.
func (r wrkResult) RPS() float64 {
	if r.DurationUS <= 0 {
		return 0
	}
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

// CPUPerRequestUS is the target's CPU microseconds per answered request (0 if not measured).
func (r wrkResult) CPUPerRequestUS() float64 {
	if r.Requests <= 0 {
		return 0
	}
	return float64(r.CPUUS) / float64(r.Requests)
}

// Errors is non-2xx responses (as wrk counts them) plus socket errors.
func (r wrkResult) Errors() int64 { return r.Status + r.Connect + r.Read + r.Write + r.Timeout }

// combineRounds pools several runs against one target: counts and time
// add up (so RPS is over the whole time), each percentile is the median of
// the runs' (a burst of load in one round does not set the cell's tail).
func combineRounds(rs []wrkResult) wrkResult {
	var c wrkResult
	var p50, p99, p999 []int64
	for _, r := range rs {
		c.Requests += r.Requests
		c.DurationUS += r.DurationUS
		c.Bytes += r.Bytes
		c.Connect += r.Connect
		c.Read += r.Read
		c.Write += r.Write
		c.Status += r.Status
		c.Timeout += r.Timeout
		c.CPUUS += r.CPUUS
		p50, p99, p999 = append(p50, r.P50US), append(p99, r.P99US), append(p999, r.P999US)
	}
	c.P50US, c.P99US, c.P999US = median(p50), median(p99), median(p999)
	return c
}

// median of the values; the mean of the middle two for an even count.
func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func usDur(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// parseWrk finds the marker line in wrk's stdout.
func parseWrk(out string) (wrkResult, error) {
	var res wrkResult
	sc := bufio.NewScanner(strings.NewReader(out))
	found := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), wrkMarker)
		if !ok {
			continue
		}
		res = wrkResult{}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return wrkResult{}, fmt.Errorf("wrk summary %q: %w", line, err)
		}
		found = true
	}
	if !found {
		return wrkResult{}, errors.New("wrk printed no summary line")
	}
	return res, nil
}

// wrkScript renders the Lua script for a request: method, body and headers
// are set once (wrk formats the request a single time), plus the done hook.
func wrkScript(method, body string, headers [][2]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "wrk.method = %s\n", luaQuote(method))
	if body != "" {
		fmt.Fprintf(&b, "wrk.body = %s\n", luaQuote(body))
	}
	for _, h := range headers {
		fmt.Fprintf(&b, "wrk.headers[%s] = %s\n", luaQuote(h[0]), luaQuote(h[1]))
	}
	b.WriteString(wrkDone)
	return b.String()
}

// luaQuote is a Lua string literal of s: printable ASCII as is, the rest
// as three-digit decimal escapes (Lua's \ddd is decimal, in 5.1 and LuaJIT;
// three digits so a following digit is never read as part of it).
func luaQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// wrkRun is one wrk invocation's settings, identical for every target.
type wrkRun struct {
	script  string // path of the Lua script
	conns   int
	dur     time.Duration
	timeout time.Duration
	cpus    []int // wrk's CPU affinity; nil = any
}

// run executes wrk against url with one thread (the load generator shares
// the machine's cores with what it measures).
func (w wrkRun) run(ctx context.Context, url string) (wrkResult, error) {
	args := []string{"-t1", "-c" + strconv.Itoa(w.conns), "-d" + secs(w.dur),
		"--timeout", secs(w.timeout), "-s", w.script, url}
	cmd := exec.CommandContext(ctx, "wrk", args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := startOn(cmd, w.cpus)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	out := stdout.String()
	res, err := parseWrk(out)
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return res, nil
}

func secs(d time.Duration) string { return strconv.Itoa(int(d.Round(time.Second)/time.Second)) + "s" }

// writeScript writes a workload's script into dir.
func writeScript(dir, name, script string) (string, error) {
	p := filepath.Join(dir, name+".lua")
	if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
		return "", fmt.Errorf("write wrk script: %w", err)
	}
	return p, nil
}
