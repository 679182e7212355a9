package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// RefusedError is a connection the address policy refused before any
// packet left: the host is, or resolves to, an address in a refused range
// (loopback, private, link-local/metadata, ...) the operator did not allow.
type RefusedError struct {
	Host string
	Addr netip.Addr
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("egress: %s is %s, a refused address (private, loopback, link-local or reserved) not allowed by the operator", e.Host, e.Addr)
}

// Dialer connects to host:port under the proxy's address policy for
// connections the gateway makes itself on an operator's behalf (webhook
// deliveries): the host is resolved when dialled, every address checked
// against the refused ranges and the operator's exceptions, and only a
// checked address dialled, never the name again, so a name that rebinds
// between an earlier check and the dial gains nothing. Unlike a sandbox's
// request, the host may be an address literal (the operator wrote it); it
// is checked the same way.
type Dialer struct{ cfg Config }

// NewDialer makes a dialer from the proxy's configuration: Resolver or
// DNSServer, AllowAddresses, DialTimeout and Dial are used.
func NewDialer(cfg Config) (*Dialer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Dialer{cfg: cfg.withDefaults()}, nil
}

// DialContext is net.Dialer's, for an http.Transport. A refused address
// fails with a *RefusedError and nothing dialled.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress: %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("egress: %q: bad port", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		if refusedAddr(a, d.cfg.AllowAddresses) {
			return nil, &RefusedError{Host: host, Addr: a}
		}
		addrs = []netip.Addr{a}
	} else if addrs, err = resolveChecked(ctx, d.cfg.Resolver, host, d.cfg.AllowAddresses); err != nil {
		return nil, err
	}
	return dialFirst(ctx, d.cfg.Dial, network, addrs, uint16(port))
}

// resolveChecked resolves host and checks every address: one refused
// address refuses the name (*RefusedError), since which one a client
// would use is not ours to choose.
func resolveChecked(ctx context.Context, r Resolver, host string, allow []netip.Prefix) ([]netip.Addr, error) {
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("egress: resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("egress: resolve %s: no address", host)
	}
	for _, a := range addrs {
		if refusedAddr(a, allow) {
			return nil, &RefusedError{Host: host, Addr: a}
		}
	}
	return addrs, nil
}

// dialFirst connects to the first of the checked addrs that answers.
func dialFirst(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), network string, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var errs []error
	for _, a := range addrs {
		c, err := dial(ctx, network, netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
