package backend

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"
)

// A sandbox that listens on a Unix socket (the process backend: its server
// sits in a network namespace of its own and no TCP port on the host leads
// to it) has a URL of the form unix:///abs/path.sock. HTTP to it goes to
// http://sandbox/... over a connection dialled to the socket.
const (
	unixScheme = "unix://"
	// UnixHost is the Host a request to a Unix-socket sandbox carries.
	UnixHost = "sandbox"
)

// UnixURL is the sandbox URL of a Unix socket at an absolute path.
func UnixURL(socket string) string { return unixScheme + socket }

// UnixSocket returns the socket path of a unix:// sandbox URL.
func UnixSocket(rawURL string) (string, bool) {
	path, ok := strings.CutPrefix(rawURL, unixScheme)
	if !ok || !strings.HasPrefix(path, "/") {
		return "", false
	}
	return path, true
}

// HTTPBase returns the base URL to send HTTP requests to for a sandbox URL,
// and the socket to dial ("" = dial the URL's host as usual).
func HTTPBase(rawURL string) (base, socket string) {
	if socket, ok := UnixSocket(rawURL); ok {
		return "http://" + UnixHost, socket
	}
	return strings.TrimSuffix(rawURL, "/"), ""
}

// notDialled is a failure to reach a sandbox socket before any connection:
// a socket that is gone (a dead sandbox) is a failed dial, as a dial by path
// reported it, so the proxy may re-resolve the thread and retry; a refused
// socket (ErrUnsafeSocket) stays what it is.
func notDialled(err error) error {
	if errors.Is(err, ErrUnsafeSocket) {
		return err
	}
	return &net.OpError{Op: "dial", Net: "unix", Err: err}
}

// DialUnix returns a DialContext that ignores the address and dials socket
// (DialSocket: never through a symlink, only to a socket whose listener
// made it); for an http.Transport whose every connection goes to one
// Unix-socket sandbox. Every backend's sandbox socket is dialled here.
func DialUnix(socket string, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return DialSocket(ctx, &d, socket, -1)
	}
}

// Client returns an HTTP client for a sandbox URL and the base URL its
// requests go to: http.DefaultClient for a TCP one, a client of its own for
// a Unix socket. For tests, tools and readiness checks; the data plane has
// its own per-incarnation pools (proxy.Transport).
func Client(rawURL string) (*http.Client, string) {
	base, socket := HTTPBase(rawURL)
	if socket == "" {
		return http.DefaultClient, base
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:       nil,
		DialContext: DialUnix(socket, 2*time.Second),
	}}, base
}

// LogURL is a sandbox URL fit for a log line: a Unix socket's path is a host
// path (under data_dir), which logs never carry, so it reads "unix socket".
func LogURL(rawURL string) string {
	if _, ok := UnixSocket(rawURL); ok {
		return "unix socket"
	}
	return rawURL
}
