// Package remote is a client of DeerFlow's sandbox provisioner API, for
// those who already run that provisioner (or another Sandgate): POST
// /api/sandboxes, GET|DELETE /api/sandboxes/{id}, GET /api/sandboxes, with
// the X-API-Key header, DeerFlow's per-call timeouts and its semantics —
// 404 is unknown, status "Running" is alive, deleting an unknown sandbox
// succeeds, and the mount-contract check before creating sandboxes for
// authenticated users.
//
// Two deliberate differences from DeerFlow's RemoteSandboxBackend, both
// because the pool, unlike DeerFlow's provider, can retry: a failed DELETE
// is an error (the record stays "destroying" and the reconciler finishes
// it; DeerFlow only logs, and the Pod leaks), and a failed GET in Discover
// is an error (503 to the client) rather than "not found", which would
// start a second create against a provisioner that is down.
//
// Data-plane requests go to the sandbox_url the provisioner returned (for
// another Sandgate, its /sandboxes/{id}, with the provisioner's admin key).
// The client's path is appended to it, so the gateway's router refuses any
// path with dot segments, in every encoding, before a sandbox is even
// looked up: a path-normalising proxy in front of the provisioner would
// otherwise resolve them into another user's sandbox.
package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// Name is the backend's name in Info.Backend and logs.
const Name = "remote"

// DeerFlow's mount contract: v2 mounts user data per user and thread. A
// provisioner below it cannot keep users apart, so only the default user
// may create sandboxes through it.
const (
	mountContractVersion = 2
	defaultUser          = "default"
	statusRunning        = "Running"
)

// timeouts are DeerFlow's RemoteSandboxBackend's, per call.
type timeouts struct {
	create, get, delete, list, capabilities time.Duration
}

var deerFlowTimeouts = timeouts{
	create: 30 * time.Second, get: 10 * time.Second, delete: 15 * time.Second,
	list: 10 * time.Second, capabilities: 5 * time.Second,
}

// discoverReadyTimeout bounds Discover's check that the sandbox answers.
const discoverReadyTimeout = 2 * time.Second

// Config of the remote backend.
type Config struct {
	// URL of the provisioner, e.g. http://provisioner:8002. Required.
	URL string
	// APIKey is sent as X-API-Key; "" sends no header.
	APIKey string
	// SandboxHosts are the hosts, besides the provisioner's own, that a
	// sandbox_url it returns may name (any port; "*" = any host). Empty =
	// only the provisioner's host: DeerFlow's provisioner on another host
	// than its sandboxes' node needs that node's host listed here.
	SandboxHosts []string
}

// Validate reports configuration errors.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if c.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("remote backend: provisioner_url %q: want an http(s) URL", c.URL)
	}
	for _, h := range c.SandboxHosts {
		if h == "*" {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		_, ipErr := netip.ParseAddr(name)
		if name == "" || ipErr != nil && strings.ContainsAny(name, "/:@?#%[] ") || checkHost(strings.ToLower(name)) != nil {
			return fmt.Errorf("remote backend: provisioner_sandbox_hosts %q: want a host name or address without a port, not a link-local, multicast, unspecified or metadata one", h)
		}
	}
	return nil
}

// Remote implements backend.Backend over a provisioner.
type Remote struct {
	base     string
	host     string   // the provisioner's host: its sandbox_urls may name it
	allowed  []string // Config.SandboxHosts
	key      string
	client   *http.Client
	timeouts timeouts
	log      *slog.Logger
}

var _ backend.Backend = (*Remote)(nil)

// Close drops the idle connections to the provisioner.
func (r *Remote) Close() error {
	r.client.CloseIdleConnections()
	return nil
}

// New checks cfg. It makes no request: the provisioner may start later.
func New(cfg Config, log *slog.Logger) (*Remote, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Remote{
		base:    strings.TrimRight(cfg.URL, "/"),
		host:    provisionerHost(cfg.URL),
		allowed: sandboxHosts(cfg.SandboxHosts),
		key:     cfg.APIKey,
		client: &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
				MaxIdleConnsPerHost: 16,
				IdleConnTimeout:     90 * time.Second,
			},
			// A redirect is answered as the status it is: followed, it
			// would carry X-API-Key to wherever the provisioner points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeouts: deerFlowTimeouts,
		log:      log.With("backend", Name),
	}, nil
}

// Ping checks that the provisioner answers GET /health (the gateway's
// /readyz): any status below 500 means it is up.
func (r *Remote) Ping(ctx context.Context) error {
	_, err := r.do(ctx, r.timeouts.capabilities, http.MethodGet, "/health", nil, nil)
	return err
}

// sandbox is the provisioner's view of one sandbox.
type sandbox struct {
	SandboxID            string `json:"sandbox_id"`
	SandboxURL           string `json:"sandbox_url"`
	Status               string `json:"status"`
	UserID               string `json:"user_id"`
	ThreadID             string `json:"thread_id"`
	MountContractVersion *int   `json:"mount_contract_version"`
}

type createRequest struct {
	SandboxID       string `json:"sandbox_id"`
	ThreadID        string `json:"thread_id"`
	UserID          string `json:"user_id"`
	RequiredVersion int    `json:"required_mount_contract_version"`
}

// Create asks the provisioner for the sandbox (idempotent there) and
// returns once it answers GET {sandbox_url}/v1/sandbox.
func (r *Remote) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if spec.SandboxID == "" {
		return backend.Info{}, errors.New("create sandbox: empty sandbox id")
	}
	log := r.log.With("sandbox_id", spec.SandboxID, "thread", spec.Thread)
	version, err := r.capabilities(ctx)
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	if version < mountContractVersion && spec.User != defaultUser {
		return backend.Info{}, fmt.Errorf("create sandbox %s: the provisioner's mount contract v%d cannot keep user %q's data apart; upgrade it to v%d",
			spec.SandboxID, version, spec.User, mountContractVersion)
	}
	began := time.Now()
	var sb sandbox
	status, err := r.do(ctx, r.timeouts.create, http.MethodPost, "/api/sandboxes", createRequest{
		SandboxID: spec.SandboxID, ThreadID: spec.Thread, UserID: spec.User, RequiredVersion: version,
	}, &sb)
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	if status != http.StatusOK && status != http.StatusCreated {
		return backend.Info{}, fmt.Errorf("create sandbox %s: provisioner answered %d", spec.SandboxID, status)
	}
	if err := r.checkCreated(sb, spec, version); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	if err := r.waitReady(ctx, sb.SandboxURL); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	log.Info("sandbox created", "duration", time.Since(began)) // not the URL: it may be a capability
	info := r.info(sb)
	info.User, info.Thread, info.Labels = spec.User, spec.Thread, spec.Labels
	return info, nil
}

// checkCreated applies DeerFlow's checks to a create response (a v2
// provisioner must echo the identity it was asked for), and ours to its
// sandbox_url, before anything connects to it.
func (r *Remote) checkCreated(sb sandbox, spec backend.Spec, version int) error {
	if err := r.checkURL(sb.SandboxURL, sb.SandboxID); err != nil {
		return err
	}
	if version < mountContractVersion {
		return nil
	}
	got := 0
	if sb.MountContractVersion != nil {
		got = *sb.MountContractVersion
	}
	if sb.SandboxID != spec.SandboxID || sb.UserID != spec.User || sb.ThreadID != spec.Thread || got != version {
		return fmt.Errorf("provisioner answered for sandbox %q user %q thread %q contract v%d, not the one asked for",
			sb.SandboxID, sb.UserID, sb.ThreadID, got)
	}
	return nil
}

// capabilities is the provisioner's mount contract version; a provisioner
// without the endpoint (404) is v0.
func (r *Remote) capabilities(ctx context.Context) (int, error) {
	var caps struct {
		Version int `json:"mount_contract_version"`
	}
	status, err := r.do(ctx, r.timeouts.capabilities, http.MethodGet, "/api/capabilities", nil, &caps)
	switch {
	case err != nil:
		return 0, fmt.Errorf("provisioner capabilities: %w", err)
	case status == http.StatusNotFound:
		return 0, nil
	case status != http.StatusOK:
		return 0, fmt.Errorf("provisioner capabilities: status %d", status)
	}
	return max(caps.Version, 0), nil
}

// Destroy deletes the sandbox; unknown to the provisioner is success.
func (r *Remote) Destroy(ctx context.Context, info backend.Info) error {
	status, err := r.do(ctx, r.timeouts.delete, http.MethodDelete, "/api/sandboxes/"+url.PathEscape(info.SandboxID), nil, nil)
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", info.SandboxID, err)
	}
	if status == http.StatusNotFound {
		return nil
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("destroy sandbox %s: provisioner answered %d", info.SandboxID, status)
	}
	r.log.Info("sandbox destroyed", "sandbox_id", info.SandboxID, "thread", info.Thread)
	return nil
}

// waitReady probes a sandbox URL; one on the provisioner's own origin
// (another Sandgate's /sandboxes/{id}) gets the API key as a bearer token,
// as the gateway's proxy sends it there. A sandbox elsewhere never sees it.
func (r *Remote) waitReady(ctx context.Context, sandboxURL string) error {
	authorization := ""
	if r.key != "" && sameOrigin(sandboxURL, r.base) {
		authorization = "Bearer " + r.key
	}
	return backend.WaitReadyAs(ctx, sandboxURL, authorization)
}

// checkURL is checkSandboxURL against this provisioner and its settings,
// and, for a URL on the provisioner's own origin, which gets the API key
// (another Sandgate's admin key), that it names sandbox sid there and no
// other: {base}/sandboxes/{sid} or a capability URL {base}/c/{capability}.
// The URL itself is never in the error: it may be a capability.
func (r *Remote) checkURL(sandboxURL, sid string) error {
	if err := checkSandboxURL(sandboxURL, r.host, r.allowed); err != nil {
		return err
	}
	if r.key == "" || !sameOrigin(sandboxURL, r.base) {
		return nil
	}
	u, _ := url.Parse(sandboxURL) // parsed by checkSandboxURL
	base, _ := url.Parse(r.base)  // validated by New
	rest, ok := strings.CutPrefix(strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(base.Path, "/"))
	if ok && (rest == "/sandboxes/"+sid || isCapabilityPath(rest)) {
		return nil
	}
	return fmt.Errorf("%w: on the provisioner's own origin (which gets its API key) it must be /sandboxes/%s or a capability URL", errSandboxURL, sid)
}

// isCapabilityPath: /c/ and a Sandgate capability (43 base64url characters).
func isCapabilityPath(p string) bool {
	c, ok := strings.CutPrefix(p, "/c/")
	return ok && len(c) == 43 && strings.Trim(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
}

// sandboxHosts are the configured hosts as url.Hostname spells them
// (IPv6 without brackets).
func sandboxHosts(hosts []string) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return out
}

func provisionerHost(base string) string {
	if u, err := url.Parse(base); err == nil {
		return u.Hostname()
	}
	return ""
}

func sameOrigin(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	return errA == nil && errB == nil && ua.Host != "" && ua.Scheme == ub.Scheme && ua.Host == ub.Host
}

// Alive is GET /api/sandboxes/{id}: status Running, at the same URL (the
// provisioner reports no incarnation; a recreated sandbox gets a new
// nodePort or capability, so the URL stands in for one: see incarnationOf).
func (r *Remote) Alive(ctx context.Context, info backend.Info) (bool, error) {
	sb, found, err := r.get(ctx, info.SandboxID)
	if err != nil || !found {
		return false, err
	}
	return sb.Status == statusRunning && (info.Incarnation == "" || incarnationOf(sb.SandboxURL) == info.Incarnation), nil
}

// Discover is GET /api/sandboxes/{id}: a Running v2 sandbox that answers.
func (r *Remote) Discover(ctx context.Context, sid string) (backend.Info, bool, error) {
	sb, found, err := r.get(ctx, sid)
	if err != nil || !found {
		return backend.Info{}, false, err
	}
	// DeerFlow ignores sandboxes of another mount contract: their user data
	// may be laid out differently. Create asks for the right one.
	if sb.Status != statusRunning || sb.MountContractVersion == nil || *sb.MountContractVersion != mountContractVersion {
		return backend.Info{}, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, discoverReadyTimeout)
	defer cancel()
	if err := r.waitReady(rctx, sb.SandboxURL); err != nil {
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("discover sandbox %s: %w", sid, ctx.Err())
		}
		r.log.Warn("sandbox running but not answering", "sandbox_id", sid, "thread", sb.ThreadID, "err", err)
		return backend.Info{}, false, nil
	}
	return r.info(sb), true, nil
}

func (r *Remote) get(ctx context.Context, sid string) (sandbox, bool, error) {
	var sb sandbox
	status, err := r.do(ctx, r.timeouts.get, http.MethodGet, "/api/sandboxes/"+url.PathEscape(sid), nil, &sb)
	switch {
	case err != nil:
		return sb, false, fmt.Errorf("get sandbox %s: %w", sid, err)
	case status == http.StatusNotFound:
		return sb, false, nil
	case status != http.StatusOK:
		return sb, false, fmt.Errorf("get sandbox %s: provisioner answered %d", sid, status)
	}
	if sb.SandboxURL == "" {
		return sb, false, fmt.Errorf("get sandbox %s: no sandbox_url in the answer", sid)
	}
	if err := r.checkURL(sb.SandboxURL, sid); err != nil {
		return sb, false, fmt.Errorf("get sandbox %s: %w", sid, err)
	}
	sb.SandboxID = sid
	return sb, true, nil
}

// List is GET /api/sandboxes: every sandbox the provisioner reports.
func (r *Remote) List(ctx context.Context) ([]backend.Info, error) {
	var body struct {
		Sandboxes []sandbox `json:"sandboxes"`
	}
	status, err := r.do(ctx, r.timeouts.list, http.MethodGet, "/api/sandboxes", nil, &body)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("list sandboxes: provisioner answered %d", status)
	}
	out := make([]backend.Info, 0, len(body.Sandboxes))
	for _, sb := range body.Sandboxes {
		if sb.SandboxID == "" || sb.SandboxURL == "" {
			continue
		}
		if err := r.checkURL(sb.SandboxURL, sb.SandboxID); err != nil {
			r.log.Warn("listed sandbox skipped", "sandbox_id", sb.SandboxID, "thread", sb.ThreadID, "err", err)
			continue
		}
		out = append(out, r.info(sb))
	}
	return out, nil
}

func (r *Remote) info(sb sandbox) backend.Info {
	labels := map[string]string{backend.LabelSandboxID: sb.SandboxID}
	if sb.UserID != "" {
		labels[backend.LabelUser] = sb.UserID
	}
	if sb.ThreadID != "" {
		labels[backend.LabelThread] = sb.ThreadID
	}
	return backend.Info{
		SandboxID: sb.SandboxID, User: sb.UserID, Thread: sb.ThreadID, URL: sb.SandboxURL,
		Incarnation: incarnationOf(sb.SandboxURL), Backend: Name, Labels: labels,
	}
}

// incarnationOf names the incarnation at sandboxURL. It is a digest, not
// the URL: incarnations are logged, and another Sandgate's sandbox_url is a
// capability URL, a credential.
func incarnationOf(sandboxURL string) string {
	sum := sha256.Sum256([]byte(sandboxURL))
	return "url-" + hex.EncodeToString(sum[:8])
}

// do makes one call with its own timeout and decodes a 2xx JSON answer
// into out. Failing to reach the provisioner, or its 5xx and 429, is
// backend.ErrUnavailable; other statuses are returned for the caller.
func (r *Remote) do(ctx context.Context, timeout time.Duration, method, path string, in, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, body)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		req.Header.Set("X-API-Key", r.key)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: provisioner %s %s: %w", backend.ErrUnavailable, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, fmt.Errorf("%w: provisioner %s %s: read answer: %w", backend.ErrUnavailable, method, path, err)
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return resp.StatusCode, fmt.Errorf("%w: provisioner %s %s answered %d: %s", backend.ErrUnavailable, method, path, resp.StatusCode, snippet(data))
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("provisioner %s %s: decode answer: %w", method, path, err)
		}
	}
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound {
		r.log.Warn("provisioner refused a call", "method", method, "path", path, "status", resp.StatusCode, "detail", snippet(data))
	}
	return resp.StatusCode, nil
}

// snippet keeps an error body short enough for a log line.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
