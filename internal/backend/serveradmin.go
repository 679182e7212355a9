package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The gateway's side of the sandbox server's own freezer and statistics
// (sandboxspec.FreezePath, ThawPath, StatsPath), for a backend with no
// freezer or container statistics of its own (Kubernetes): it delegates
// its Freezer to ServerFreezer and its Statter to ServerStats. And its
// command log (sandboxspec.CommandsPath), on every backend: ServerCommands.

// serverAdminTimeout bounds one call: the server itself gives a freeze up
// to 10 s before it undoes it.
const serverAdminTimeout = 15 * time.Second

// serverAdminClient calls sandboxes on TCP; it follows no redirect, which
// would carry the sandbox secret wherever the sandbox (whose server its
// tenant may control) points.
var serverAdminClient = &http.Client{
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
	},
	Timeout:       serverAdminTimeout,
	CheckRedirect: noRedirect,
}

// ServerFreezer freezes a sandbox through its server: every process of
// the sandbox but the server stops (SIGSTOP) and is continued on thaw;
// the server keeps answering. Both are idempotent.
type ServerFreezer struct{}

var _ Freezer = ServerFreezer{}

// Freeze returns once every process of the sandbox is stopped.
func (ServerFreezer) Freeze(ctx context.Context, info Info) error {
	_, err := callServer[sandboxspec.Freeze](ctx, info, http.MethodPost, sandboxspec.FreezePath)
	return err
}

// Thaw continues what Freeze stopped.
func (ServerFreezer) Thaw(ctx context.Context, info Info) error {
	_, err := callServer[sandboxspec.Freeze](ctx, info, http.MethodPost, sandboxspec.ThawPath)
	return err
}

// ServerStats measures a sandbox through its server (its cgroup, or its
// processes in /proc). The cgroup's OOM kill count goes on to the
// sampler, which publishes oom_killed when it grows.
func ServerStats(ctx context.Context, info Info) (Stats, error) {
	st, err := callServer[sandboxspec.Stats](ctx, info, http.MethodGet, sandboxspec.StatsPath)
	if err != nil {
		return Stats{}, err
	}
	return Stats{CPUSeconds: st.CPUSeconds, MemoryBytes: st.MemoryBytes, PIDs: st.PIDs, OOMKills: st.OOMKills,
		At: time.Now().UTC()}, nil
}

// ServerCommands reads the last limit records of the commands that ended
// in a sandbox (sandboxspec.CommandsPath; 0 = all it keeps), oldest first.
func ServerCommands(ctx context.Context, info Info, limit int) (sandboxspec.CommandLog, error) {
	return callServer[sandboxspec.CommandLog](ctx, info, http.MethodGet,
		sandboxspec.CommandsPath+"?"+sandboxspec.CommandsLimitParam+"="+strconv.Itoa(max(limit, 0)))
}

// maxServerAnswer bounds an answer read: a full command log
// (sandboxspec.MaxCommandRecords records of at most
// sandboxspec.MaxRecordedCommand bytes each) fits.
const maxServerAnswer = 1 << 20

// callServer sends one bodyless request to the sandbox's server and
// decodes the data of its envelope. A server that cannot be reached is
// ErrUnavailable; one without the route (a third-party image, an older
// server) or the platform for it is ErrNotSupported; any other refusal
// (a wrong secret: 401) is an error naming the status and the server's
// message.
func callServer[T any](ctx context.Context, info Info, method, path string) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(ctx, serverAdminTimeout)
	defer cancel()
	client := serverAdminClient
	base, socket := HTTPBase(info.URL)
	if socket != "" {
		client = unixClient(socket, serverAdminTimeout)
		defer client.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return zero, fmt.Errorf("sandbox %s %s: %w", info.SandboxID, path, err)
	}
	if info.Secret != "" {
		req.Header.Set(sandboxspec.SecretHeader, info.Secret)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) { // not the URL: behind another gateway it holds a capability
			err = ue.Err
		}
		return zero, fmt.Errorf("sandbox %s %s: %w: %w", info.SandboxID, path, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	var env struct {
		Message string `json:"message"`
		Data    T      `json:"data"`
	}
	decodeErr := json.NewDecoder(io.LimitReader(resp.Body, maxServerAnswer)).Decode(&env)
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusNotImplemented:
		return zero, fmt.Errorf("sandbox %s %s: %w (%d %s)", info.SandboxID, path, ErrNotSupported, resp.StatusCode, env.Message)
	case resp.StatusCode != http.StatusOK:
		return zero, fmt.Errorf("sandbox %s %s: answered %d: %s", info.SandboxID, path, resp.StatusCode, env.Message)
	case decodeErr != nil:
		return zero, fmt.Errorf("sandbox %s %s: decode answer: %w", info.SandboxID, path, decodeErr)
	}
	return env.Data, nil
}
