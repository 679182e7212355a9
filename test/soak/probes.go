package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// probe is one bad input or one data-dir fault, tried once on the live
// fleet before the load starts, with the status it must get.
type probe struct {
	name    string
	want    string // "400", "507 storage_unavailable", ...
	got     string
	pass    bool
	skipped bool // the machine does not allow the fault (reason in got)
}

type probeReq struct {
	name, method, path, body string
	header                   map[string]string
	want                     string
}

var badInputs = []probeReq{
	{name: "thread id `..`", method: "GET", path: "/threads/../v1/sandbox", want: "400 bad_request"},
	{name: "thread id `%2E%2E` (encoded ..)", method: "GET", path: "/threads/%2E%2E/v1/sandbox", want: "400 bad_request"},
	{name: "thread id with an encoded `/`", method: "GET", path: "/threads/a%2Fb/v1/sandbox", want: "400 bad_request"},
	{name: "thread id of 200 characters", method: "GET", path: "/threads/" + strings.Repeat("x", 200) + "/v1/sandbox", want: "400 bad_request"},
	{name: "thread id with non-ASCII", method: "GET", path: "/threads/%C3%BC/v1/sandbox", want: "400 bad_request"},
	{name: "thread id with a space", method: "GET", path: "/threads/a%20b/v1/sandbox", want: "400 bad_request"},
	{name: "empty thread id", method: "GET", path: "/threads//v1/sandbox", want: "400 bad_request"},
	{name: "thread id `.` on the control route", method: "GET", path: "/threads/./sandbox", want: "400 bad_request"},
	{name: "malformed sandbox id", method: "GET", path: "/sandboxes/NOT-A-SANDBOX/v1/sandbox", want: "400 bad_request"},
	{name: "unknown sandbox id (never provisions)", method: "GET", path: "/sandboxes/0123456789abcdef/v1/sandbox", want: "404 not_found"},
	{name: "bad `destroy` flag", method: "DELETE", path: "/threads/probe-flag/sandbox?destroy=maybe", want: "400 bad_request"},
	{name: "cross-site browser request (`Sec-Fetch-Site`)", method: "POST", path: "/threads/probe-xsite/v1/shell/exec",
		body: `{"command":"true"}`, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: "403 forbidden"},
	{name: "foreign `Origin`", method: "POST", path: "/threads/probe-origin/v1/shell/exec",
		body: `{"command":"true"}`, header: map[string]string{"Origin": "http://evil.example"}, want: "403 forbidden"},
	{name: "malformed JSON to the sandbox", method: "POST", path: "/threads/probe-json/v1/shell/exec", body: `{"command":`, want: "400 sandbox"},
	{name: "exec without `command`", method: "POST", path: "/threads/probe-json/v1/shell/exec", body: `{}`, want: "422 sandbox"},
}

// probeThreadsAllowed are the probe threads a bad input may provision (a
// well-formed thread whose sandbox rejects the body); the rest must not.
var probeThreadsAllowed = map[string]bool{"probe-json": true}

func runProbes(ctx context.Context, c *cluster, logf func(string, ...any)) []probe {
	var out []probe
	for _, p := range badInputs {
		got, body := c.raw(ctx, p)
		pr := probe{name: p.name, want: p.want, got: got, pass: got == p.want}
		if c.leaksPath(body) {
			pr.pass, pr.got = false, got+" (body names a host path)"
		}
		out = append(out, pr)
	}
	// The one thread that legitimately got a sandbox goes again.
	out = append(out, c.destroyProbe(ctx, "probe-json"))
	out = append(out, c.dataDirProbes(ctx)...)
	procs, err := scanSandboxes(c.bin, c.dataDir)
	made := 0
	for _, p := range procs {
		if strings.HasPrefix(p.thread, "probe-") && !probeThreadsAllowed[p.thread] {
			made++
		}
	}
	out = append(out, probe{name: "sandboxes created by the inputs above", want: "0", got: strconv.Itoa(made), pass: err == nil && made == 0})
	failed := 0
	for _, p := range out {
		if !p.pass && !p.skipped {
			failed++
			logf("probe %s: got %s, want %s", p.name, p.got, p.want)
		}
	}
	logf("probes: %d tried, %d answered wrongly", len(out), failed)
	return out
}

// raw sends p with its path verbatim (no client-side cleaning) and returns
// "status code" and the body.
func (c *cluster) raw(ctx context.Context, p probeReq) (string, []byte) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, p.method, c.replicas[0].url+"/", strings.NewReader(p.body))
	if err != nil {
		return "error " + err.Error(), nil
	}
	req.URL.Opaque = p.path
	if i := strings.IndexByte(p.path, '?'); i >= 0 {
		req.URL.Opaque, req.URL.RawQuery = p.path[:i], p.path[i+1:]
	}
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range p.header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "conn " + connErrorKind(err), nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return strconv.Itoa(resp.StatusCode) + " " + errorCode(body), body
}

func (c *cluster) leaksPath(body []byte) bool {
	return strings.Contains(string(body), c.dir) || strings.Contains(string(body), "/users/")
}

func (c *cluster) destroyProbe(ctx context.Context, thread string) probe {
	got, _ := c.raw(ctx, probeReq{method: "DELETE", path: "/threads/" + thread + "/sandbox?destroy=true"})
	return probe{name: "destroy of the sandbox the malformed-JSON probe made", want: "204 -", got: got, pass: got == "204 -"}
}

// dataDirProbes break one probe thread's data directory each way a root
// process can be refused (the soak runs as root, where mode bits do not
// bind): a file where the directory must be, the immutable attribute, a
// full tmpfs. Each must answer 507 without a host path: storage_unavailable,
// or insufficient_storage for the full disk (ENOSPC names what ran out).
func (c *cluster) dataDirProbes(ctx context.Context) []probe {
	threads := filepath.Join(c.dataDir, "users", "default", "threads")
	if err := os.MkdirAll(threads, 0o755); err != nil {
		return []probe{{name: "data dir", got: err.Error()}}
	}
	try := func(name, thread, want string, breakIt func(dir string) (repair func(), skip error)) probe {
		dir := filepath.Join(threads, thread)
		repair, skip := breakIt(dir)
		if skip != nil {
			return probe{name: name, want: want, got: "skipped: " + skip.Error(), skipped: true}
		}
		defer repair()
		got, body := c.raw(ctx, probeReq{method: "POST", path: "/threads/" + thread + "/v1/shell/exec", body: `{"command":"true"}`})
		pr := probe{name: name, want: want, got: got, pass: got == want}
		if c.leaksPath(body) {
			pr.pass, pr.got = false, got+" (body names a host path)"
		}
		return pr
	}
	return []probe{
		try("data dir: a file where the thread's directory must be (ENOTDIR)", "probe-notdir", "507 storage_unavailable", func(dir string) (func(), error) {
			if err := os.WriteFile(dir, []byte("x"), 0o644); err != nil {
				return nil, err
			}
			return func() { _ = os.Remove(dir) }, nil
		}),
		try("data dir: thread directory immutable (EPERM, binds root too)", "probe-eperm", "507 storage_unavailable", func(dir string) (func(), error) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, err
			}
			if out, err := exec.CommandContext(ctx, "chattr", "+i", dir).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("chattr +i: %v %s", err, strings.TrimSpace(string(out)))
			}
			return func() { _ = exec.Command("chattr", "-i", dir).Run() }, nil
		}),
		try("data dir: disk full (a full tmpfs, blocks and inodes)", "probe-full", "507 insufficient_storage", func(dir string) (func(), error) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, err
			}
			if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,nr_inodes=16"); err != nil {
				return nil, fmt.Errorf("this machine does not allow mounting a tmpfs: %w", err)
			}
			unmount := func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }
			if err := fillDir(dir); err != nil {
				unmount()
				return nil, err
			}
			return unmount, nil
		}),
	}
}

// fillDir writes into dir until its filesystem has neither a block nor an
// inode left.
func fillDir(dir string) error {
	f, err := os.Create(filepath.Join(dir, "blocks"))
	if err != nil {
		return err
	}
	chunk := make([]byte, 16<<10)
	for err == nil {
		_, err = f.Write(chunk)
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("fill: %w", err)
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, "inode-"+strconv.Itoa(i)))
		if errors.Is(err, syscall.ENOSPC) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		f.Close()
		if i > 1<<16 {
			return errors.New("fill: inodes never ran out")
		}
	}
}
