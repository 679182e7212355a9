package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// Resolver resolves a name to addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Recorder counts decisions (telemetry.Metrics is one): allowed says the
// request or tunnel got through, reason is one of the Reason constants.
type Recorder interface {
	EgressDecision(allowed bool, reason string)
}

// Defaults for the zero Config.
const (
	DefaultDialTimeout = 10 * time.Second
	// DefaultIdleTimeout ends a tunnel after five quiet minutes in both
	// directions: long enough for a slow build step's download or a
	// long-poll, short enough that abandoned tunnels do not pile up.
	DefaultIdleTimeout = 5 * time.Minute
)

// Config configures a Proxy. The zero value resolves with net.DefaultResolver,
// refuses every private address, dials with a 10 s timeout, ends tunnels
// idle for 5 minutes, logs to slog.Default and records nothing.
type Config struct {
	// Resolver resolves allowed names; nil means net.DefaultResolver, or the
	// DNSServer when that is set. Not both.
	Resolver Resolver
	// DNSServer, "ip:port", sends every query to that server alone (Go's
	// resolver), not to resolv.conf's servers; /etc/hosts still answers
	// first, and whatever answers, the addresses are checked.
	DNSServer string
	// AllowAddresses are otherwise refused addresses a name may resolve to,
	// such as an internal package mirror.
	AllowAddresses []netip.Prefix
	// DialTimeout bounds resolving a name and connecting to it.
	DialTimeout time.Duration
	// IdleTimeout ends a tunnel with no traffic either way for this long,
	// and closes a sandbox's idle keep-alive connection to the proxy.
	IdleTimeout time.Duration
	Log         *slog.Logger
	Recorder    Recorder
	// Denied hears of each request or tunnel of a known sandbox that its
	// policy refused (403: a name off the allow-list, a private address,
	// an IP literal, a tunnel's wrong server name), before anything was
	// dialled; nil = none. It must not block (the gateway makes it a
	// rate-limited egress_denied event).
	Denied func(id backend.EgressIdentity, host, reason string)
	// Dial connects to a checked address ("ip:port", never a name); nil
	// means a net.Dialer. Tests count dials with it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Resolver != nil && c.DNSServer != "" {
		return errors.New("egress: set resolver or dns server, not both")
	}
	if c.DNSServer != "" {
		if _, err := netip.ParseAddrPort(c.DNSServer); err != nil {
			return fmt.Errorf("egress: dns server %q: want ip:port: %w", c.DNSServer, err)
		}
	}
	for _, p := range c.AllowAddresses {
		if !p.IsValid() || p.Masked() != p {
			return fmt.Errorf("egress: allow address %s: want a prefix such as 10.1.2.0/24", p)
		}
	}
	if c.DialTimeout < 0 || c.IdleTimeout < 0 {
		return errors.New("egress: timeouts must not be negative")
	}
	return nil
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Recorder == nil {
		c.Recorder = noRecorder{}
	}
	if c.Dial == nil {
		c.Dial = (&net.Dialer{}).DialContext
	}
	if c.DNSServer != "" {
		server := c.DNSServer
		c.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

type noRecorder struct{}

func (noRecorder) EgressDecision(bool, string) {}
