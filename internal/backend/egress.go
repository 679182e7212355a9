package backend

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// EgressMode says what a sandbox may reach outside itself. Whatever the
// mode, a sandbox never reaches another sandbox or the gateway's host
// services directly: that boundary is the backend's (docs/SECURITY.md).
type EgressMode string

const (
	// EgressNone: no traffic leaves the sandbox.
	EgressNone EgressMode = "none"
	// EgressProxy: the sandbox's only way out is the gateway's egress proxy
	// (HTTP_PROXY/HTTPS_PROXY), which lets through the allow-listed domains.
	// The default; with an empty allow-list it lets nothing through.
	EgressProxy EgressMode = "proxy"
	// EgressOpen: direct traffic to anything the host can route to, except
	// other sandboxes. For trusted code only.
	EgressOpen EgressMode = "open"
)

// Egress is one sandbox's egress policy.
type Egress struct {
	Mode EgressMode `json:"mode" yaml:"mode"`
	// Allow lists the domains the proxy lets through: "example.com" (that
	// name only) or "*.example.com" (any name below it, not the apex), each
	// optionally with ":port" (any port when absent).
	Allow []string `json:"allow,omitempty" yaml:"allow"`
}

// EffectiveMode is Mode with the default applied.
func (e Egress) EffectiveMode() EgressMode {
	if e.Mode == "" {
		return EgressProxy
	}
	return e.Mode
}

// Validate names the first bad part of the policy.
func (e Egress) Validate() error {
	switch e.EffectiveMode() {
	case EgressNone, EgressProxy, EgressOpen:
	default:
		return fmt.Errorf("egress: %q is not none, proxy or open", e.Mode)
	}
	for _, a := range e.Allow {
		if err := validAllowEntry(a); err != nil {
			return fmt.Errorf("egress allow %q: %w", a, err)
		}
	}
	return nil
}

// validAllowEntry accepts [*.]domain[:port] with a DNS-shaped domain.
func validAllowEntry(a string) error {
	host, port, hasPort := strings.Cut(a, ":")
	if hasPort {
		if p, err := netip.ParseAddrPort("0.0.0.0:" + port); err != nil || p.Port() == 0 {
			return fmt.Errorf("bad port %q", port)
		}
	}
	host = strings.TrimPrefix(host, "*.")
	if host == "" || len(host) > 253 || strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") || strings.Contains(host, "..") {
		return fmt.Errorf("want a domain such as example.com or *.example.com")
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("want a domain such as example.com or *.example.com")
		}
	}
	return nil
}

// EgressIdentity is who a proxied connection belongs to, for the policy,
// the logs and the metrics.
type EgressIdentity struct {
	SandboxID string
	User      string
	Thread    string
	Egress    Egress
}

// EgressGate serves the egress proxy for one sandbox on a Unix socket that
// the backend makes visible inside the sandbox: the socket a connection
// arrives on is its identity, so no credential is needed. Open replaces a
// socket left by an earlier gateway process (a sandbox adopted after a
// restart); Reassign serves one sandbox's socket as another id's (a claimed
// pre-started sandbox); Close stops serving it. Implemented by
// internal/egress.
type EgressGate interface {
	Open(id EgressIdentity, socket string) error
	Reassign(from string, id EgressIdentity, socket string) error
	Close(sandboxID string)
}

// ProxyEnv is the environment that points a sandbox's HTTP clients at its
// egress proxy on proxyURL (both spellings: curl reads lower case, most
// other tools upper).
func ProxyEnv(proxyURL string) map[string]string {
	const noProxy = "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": proxyURL, "HTTPS_PROXY": proxyURL, "ALL_PROXY": proxyURL, "NO_PROXY": noProxy,
		"http_proxy": proxyURL, "https_proxy": proxyURL, "all_proxy": proxyURL, "no_proxy": noProxy,
	}
}

// EgressSocket is where one running sandbox expects its egress proxy.
type EgressSocket struct {
	Identity EgressIdentity
	Path     string
}

// EgressSockets is implemented by backends whose sandboxes reach the egress
// proxy through a Unix socket on this host (process, docker). A gateway
// serves every one that nobody answers on: after a restart, or when the
// replica that served it is gone.
type EgressSockets interface {
	EgressSockets(ctx context.Context) ([]EgressSocket, error)
}

// EgressSocketName is the proxy socket's name in the directory bound into
// the sandbox at EgressDir.
const EgressSocketName = "proxy.sock"

// EgressDir is where a sandbox sees its egress socket's directory, and
// EgressSocketPath the socket in it.
const (
	EgressDir        = "/run/sandgate/egress"
	EgressSocketPath = EgressDir + "/" + EgressSocketName
)

// EgressIdentity is who the sandbox of s is to the egress proxy.
func (s Spec) EgressIdentity() EgressIdentity {
	return EgressIdentity{SandboxID: s.SandboxID, User: s.User, Thread: s.Thread, Egress: s.Egress}
}
