package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is an OTLP/HTTP trace receiver that decodes each payload and
// counts spans per service.instance.id, so the suite can say what was
// exported without a collector on the machine.
type otlpSink struct {
	url string
	srv *http.Server
	mu  sync.Mutex
	n   map[string]int64
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp sink: %w", err)
	}
	s := &otlpSink{url: "http://" + ln.Addr().String(), n: map[string]int64{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		instance := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.instance.id" {
				instance = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			s.n[instance] += int64(len(ss.GetSpans()))
		}
	}
	s.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// counts is a snapshot of spans received per instance.
func (s *otlpSink) counts() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.n))
	for k, v := range s.n {
		out[k] = v
	}
	return out
}

func (s *otlpSink) close() { _ = s.srv.Close() }

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op\s+(\d+) B/op\s+(\d+) allocs/op`)

// goBench runs the matching Go benchmarks 5 times with -benchmem in root
// and returns "name: N ns/op, B B/op, A allocs/op" per benchmark, N the
// median.
func goBench(ctx context.Context, root, pattern string, pkgs ...string) ([]string, error) {
	args := append([]string{"test", "-run", "^$", "-bench", pattern, "-benchmem", "-count", "5"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	type agg struct {
		ns            []int64
		bytes, allocs string
	}
	var order []string
	by := map[string]*agg{}
	for _, line := range strings.Split(string(out), "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		a := by[m[1]]
		if a == nil {
			a = &agg{}
			by[m[1]] = a
			order = append(order, m[1])
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		a.ns = append(a.ns, int64(ns*100))
		a.bytes, a.allocs = m[3], m[4]
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("go %s: no benchmark results\n%s", strings.Join(args, " "), out)
	}
	res := make([]string, 0, len(order))
	for _, name := range order {
		a := by[name]
		slices.Sort(a.ns)
		res = append(res, fmt.Sprintf("%s %.1f ns/op, %s B/op, %s allocs/op", name, float64(median(a.ns))/100, a.bytes, a.allocs))
	}
	return res, nil
}
