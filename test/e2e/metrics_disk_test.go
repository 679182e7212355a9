package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// TestSandboxMetricsDiskAndEgress: a process sandbox that writes 20 MiB
// into its thread's data and downloads 3 MiB through the egress proxy from
// a loopback origin shows, through GET /threads/{t}/sandbox/metrics, its
// thread data grown by the 20 MiB and at least the 3 MiB received, within
// a disk pass (5 intervals) and a sample of the command's end; the
// operator's stats (top) and Prometheus carry the same figures.
func TestSandboxMetricsDiskAndEgress(t *testing.T) {
	t.Parallel()
	w := newEgressWorld(t)
	big := bytes.Repeat([]byte("sandgate egress!"), 3<<16) // 3 MiB
	ln, err := net.Listen("tcp", "127.0.0.2:0")            // allowed by w's flags
	if err != nil {
		t.Fatalf("origin on 127.0.0.2: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write(big) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	f := newFleet(t, append(w.flags("proxy"), "--metrics-per-sandbox")...)
	g := f.start()
	const th = "disk-egress"
	shell(t, g.URL, th, "true")
	// The first disk pass runs within an interval of the first sample.
	base := waitSample(t, g.URL, th, 5*time.Second, func(s api.MetricsSample) bool { return s.DataBytes > 0 })
	if base.EgressReceivedBytes != 0 {
		t.Fatalf("egress received %d before any request", base.EgressReceivedBytes)
	}

	out, code := run(t, g, th, "head -c 20971520 /dev/urandom > /mnt/user-data/workspace/blob && sync && "+
		"curl -sS -m 20 -o /dev/null -w '%{size_download}' http://example.internal:"+port+"/big")
	if code != 0 || out != strconv.Itoa(len(big)) {
		t.Fatalf("write and download: exit %d: %q", code, out)
	}
	began := time.Now()
	got := waitSample(t, g.URL, th, 10*time.Second, func(s api.MetricsSample) bool {
		return s.DataBytes-base.DataBytes >= 20<<20 && s.EgressReceivedBytes >= int64(len(big))
	})
	t.Logf("seen %s after the command: data %d -> %d bytes, egress sent %d received %d", time.Since(began).Round(time.Millisecond),
		base.DataBytes, got.DataBytes, got.EgressSentBytes, got.EgressReceivedBytes)
	if grown := got.DataBytes - base.DataBytes; grown > 22<<20 {
		t.Errorf("thread data grew %d bytes for a 20 MiB file", grown)
	}
	// Received: the body, its headers, nothing twice. Sent: a request.
	if got.EgressReceivedBytes > int64(len(big))+16<<10 || got.EgressSentBytes <= 0 || got.EgressSentBytes > 16<<10 {
		t.Errorf("egress sent %d received %d for one 3 MiB download", got.EgressSentBytes, got.EgressReceivedBytes)
	}

	// top's source: the operator's stats take the sampler's figures.
	code, body, _ := call(t, "GET", g.URL+"/admin/v1/stats?thread="+th, nil)
	var stats api.StatsList
	if code != 200 || json.Unmarshal(body, &stats) != nil || len(stats.Sandboxes) != 1 || stats.Sandboxes[0].Stats == nil ||
		stats.Sandboxes[0].DataBytes < got.DataBytes-1<<20 || stats.Sandboxes[0].EgressReceivedBytes < int64(len(big)) {
		t.Errorf("admin stats lack the disk and egress figures: %d %s", code, body)
	}
	_, metrics, _ := call(t, "GET", g.URL+"/metrics", nil)
	sid := `{sandbox_id="` + got.sandboxID + `"}`
	for _, want := range []string{"sandgate_sampled_data_bytes ", "sandgate_sampled_egress_received_bytes ",
		"sandgate_sandbox_data_bytes" + sid, "sandgate_sandbox_egress_received_bytes_total" + sid} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// sampleOf is a latest sample and its sandbox.
type sampleOf struct {
	api.MetricsSample
	sandboxID string
}

// waitSample polls thread's metrics until its latest sample satisfies ok.
func waitSample(t *testing.T, base, thread string, within time.Duration, ok func(api.MetricsSample) bool) sampleOf {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := getMetrics(t, base, thread)
		if m.Latest != nil && ok(*m.Latest) {
			return sampleOf{*m.Latest, m.SandboxID}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such sample of %s within %s; the latest: %+v", thread, within, m.Latest)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSandboxMetricsDiskDocker: a docker sandbox's samples carry its
// container's writable layer (what it wrote outside its mounts, as the
// engine sizes it) apart from its thread data (what it wrote in its
// workspace), each within a disk pass.
func TestSandboxMetricsDiskDocker(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet().start()
	const th = "ddisk"
	shell(t, g.URL, th, "true")
	base := waitSample(t, g.URL, th, 10*time.Second, func(s api.MetricsSample) bool { return s.DataBytes > 0 })
	out, code := run(t, g, th, "head -c 8388608 /dev/urandom > /tmp/layer-blob && head -c 12582912 /dev/urandom > /mnt/user-data/workspace/blob && sync && echo ok")
	if code != 0 || out != "ok\n" {
		t.Fatalf("writes: exit %d: %q", code, out)
	}
	got := waitSample(t, g.URL, th, 20*time.Second, func(s api.MetricsSample) bool {
		return s.LayerBytes-base.LayerBytes >= 8<<20 && s.DataBytes-base.DataBytes >= 12<<20
	})
	if layer := got.LayerBytes - base.LayerBytes; layer > 10<<20 {
		t.Errorf("layer grew %d bytes for 8 MiB written outside the mounts (the workspace's 12 MiB counted in it?)", layer)
	}
	if data := got.DataBytes - base.DataBytes; data > 14<<20 {
		t.Errorf("thread data grew %d bytes for 12 MiB written in the workspace", data)
	}
}
