package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/identity"
)

func init() { register("preview-links", previewLinks) }

// previewConns is the connection count of the comparison.
const previewConns = 64

// previewLinks measures a small GET through a preview link against the
// same sandbox's small GET through /threads/{t}/v1 and the same file
// through the owner's port route, interleaved as proxy-throughput's cells.
func previewLinks(ctx context.Context) (Result, error) {
	began := time.Now()
	tmp, err := os.MkdirTemp("", "sandgate-bench-preview-")
	if err != nil {
		return Result{}, err
	}
	var cleanup cleanupStack
	defer func() { cleanup.run(); _ = os.RemoveAll(tmp) }()

	bin, err := buildGateway(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "redis"), 0o755); err != nil {
		return Result{}, err
	}
	redis, redisAddr, err := startRedis(ctx, filepath.Join(tmp, "redis"))
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(context.Context) { redis.stop(syscall.SIGTERM, 5*time.Second) })
	dataDir := filepath.Join(tmp, "data")
	gw, gwAddr, err := startGatewayEnv(ctx, bin, redisAddr, dataDir, filepath.Join(tmp, "gateway.log"), nil)
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(context.Context) { gw.stop(syscall.SIGTERM, 10*time.Second) })
	p, err := process.New(process.Config{StateDir: filepath.Join(dataDir, "sandboxes", "process"), Binary: process.SandboxBinary(bin)},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Result{}, err
	}
	sid := identity.SandboxID(proxyUser, proxyThread)
	cleanup.push(func(ctx context.Context) { _ = p.Destroy(ctx, backend.Info{SandboxID: sid}) })

	// The app on the (isolated) sandbox's own loopback, reached only
	// through the sandbox server's bridge: a threaded Python server that
	// keeps connections alive (busybox httpd forks and closes per request,
	// which would bound both app rows).
	thread := "http://" + gwAddr + "/threads/" + proxyThread
	start, err := json.Marshal(map[string]string{"command": "cat > app.py <<'EOF'\n" + previewApp + "EOF\n" +
		"(setsid python3 app.py >/dev/null 2>&1 &)"})
	if err != nil {
		return Result{}, err
	}
	if _, err := call(ctx, http.MethodPost, thread+"/v1/shell/exec", string(start), [][2]string{{"Content-Type", "application/json"}}); err != nil {
		return Result{}, fmt.Errorf("start the app: %w", err)
	}
	body, err := call(ctx, http.MethodPost, thread+"/previews", `{"port":3000,"ttl":"1h"}`, [][2]string{{"Content-Type", "application/json"}})
	if err != nil {
		return Result{}, fmt.Errorf("create a link: %w", err)
	}
	var link struct {
		PathURL string `json:"path_url"`
	}
	if err := json.Unmarshal(body, &link); err != nil || link.PathURL == "" {
		return Result{}, fmt.Errorf("create a link: %s", body)
	}
	cpu := func() (time.Duration, error) { return processCPU(gw.pid()) }
	targets := []target{
		{name: "/threads/{t}/v1/sandbox", base: thread + "/v1/sandbox", cpu: cpu},
		{name: "/threads/{t}/ports/3000/small.txt", base: thread + "/ports/3000/small.txt", cpu: cpu},
		{name: "preview link /small.txt", base: link.PathURL + "small.txt", cpu: cpu},
	}
	w := workload{name: "small GET", method: http.MethodGet, check: func(resp *http.Response, _ []byte) error {
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}}
	for _, t := range targets {
		// The app may still be binding: a few tries.
		for try := 0; ; try++ {
			if err = sanityCheck(ctx, t, w); err == nil || try == 20 {
				break
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return Result{}, err
			}
		}
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	script, err := writeScript(tmp, "preview", wrkScript(w.method, "", nil))
	if err != nil {
		return Result{}, err
	}
	cell, err := measureTargets(ctx, targets, w, script, previewConns)
	if err != nil {
		return Result{}, err
	}
	var rows [][]string
	figures := map[string]float64{}
	for i, t := range targets {
		r := cell[i]
		rows = append(rows, []string{t.name, fmt.Sprint(previewConns), fmt.Sprintf("%.0f", r.RPS()),
			fmt.Sprintf("%s / %s / %s", ms(usDur(r.P50US)), ms(usDur(r.P99US)), ms(usDur(r.P999US))),
			fmt.Sprintf("%.1f", r.CPUPerRequestUS()), fmt.Sprint(r.Errors())})
		figures[fmt.Sprintf("target%d_rps", i)] = r.RPS()
		figures[fmt.Sprintf("target%d_p99_ms", i)] = float64(r.P99US) / 1000
	}
	return Result{
		Title:   "Preview links: a small GET through a link vs the owner's routes",
		Columns: []string{"route", "conns", "req/s", "p50 / p99 / p99.9 ms", "gateway CPU µs/req", "errors"},
		Rows:    rows,
		Figures: figures,
		Notes: []string{
			"One gateway (process backend, isolated sandbox, real redis-server, no authentication), the thread's sandbox " +
				"running a threaded Python HTTP/1.1 server (keep-alive) on its own 127.0.0.1:3000 as the app. Rows: the sandbox " +
				"API's small GET (as proxy-throughput's) through /threads/{t}/v1; the app's small GET through the owner's port " +
				"route (one more hop, the sandbox server's bridge into its loopback, and a slower app); and through a preview " +
				"link's path form (`/preview/{link}/`). " +
				"The last two differ only by the link's verification (parse, expiry, revocation, route cache, HMAC-SHA256; see " +
				"BenchmarkPreviewVerify in go-bench) in place of the credential check.",
			fmt.Sprintf("wrk -t1 on %d cores shared with the gateway and the sandbox, measured as proxy-throughput's cells "+
				"(warm-up, then rounds in rotating order); compare within this table, not across runs. The suite took %s.",
				runtime.NumCPU(), time.Since(began).Round(time.Second)),
		},
	}, nil
}

// previewApp is the bench's app: 5 bytes at /small.txt over HTTP/1.1.
const previewApp = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"small")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 3000), H).serve_forever()
`
