package egress

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/backend"
)

// Reasons name a decision in logs, metrics and the denial body. They are
// stable: dashboards and alerts key on them.
const (
	ReasonOK             = "ok"              // let through
	ReasonNotAllowed     = "not_allowed"     // the name is not on the allow-list
	ReasonModeNone       = "mode_none"       // the sandbox has no egress at all
	ReasonIPLiteral      = "ip_literal"      // an address instead of a name
	ReasonPrivateAddress = "private_address" // the name resolves to a refused address
	ReasonResolveFailed  = "resolve_failed"  // the name did not resolve
	ReasonBadRequest     = "bad_request"     // not a proxy request we serve
	ReasonDialFailed     = "dial_failed"     // no connection to the checked address
	ReasonUpstreamFailed = "upstream_failed" // connected, then the upstream failed
	ReasonUnauthorized   = "unauthorized"    // ServeAuth: no or wrong credentials
	ReasonNotTLS         = "not_tls"         // a tunnel that does not start with a TLS ClientHello
	ReasonNoSNI          = "sni_missing"     // a tunnel's ClientHello names no server
	ReasonSNIMismatch    = "sni_mismatch"    // a tunnel's ClientHello names another server than its CONNECT
)

// target is a host and port as the client asked for them, normalised:
// lower case, no trailing dot, no IPv6 brackets.
type target struct {
	host string
	port uint16
}

func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(int(t.port))) }

// parseTarget splits an authority (host[:port]); defaultPort applies when the
// port is absent, and 0 means a port is required (CONNECT). The reason is
// empty when the target is a name the policy can judge.
func parseTarget(authority string, defaultPort uint16) (target, string) {
	host, portStr := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.HasSuffix(authority, "]") {
		var err error
		if host, portStr, err = net.SplitHostPort(authority); err != nil {
			return target{host: authority}, ReasonBadRequest
		}
	}
	t := target{host: strings.TrimSuffix(strings.ToLower(host), "."), port: defaultPort}
	if portStr != "" {
		p, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || p == 0 {
			return t, ReasonBadRequest
		}
		t.port = uint16(p)
	}
	if t.port == 0 {
		return t, ReasonBadRequest
	}
	if strings.HasPrefix(t.host, "[") {
		if _, err := netip.ParseAddr(strings.Trim(t.host, "[]")); err == nil {
			return t, ReasonIPLiteral
		}
		return t, ReasonBadRequest
	}
	if _, err := netip.ParseAddr(t.host); err == nil {
		return t, ReasonIPLiteral
	}
	return t, checkName(t.host)
}

// checkName accepts DNS-shaped names only. A name whose last label is a
// number (127.1, 0x7f.1, 2130706433) is an address in disguise: resolvers
// built on inet_aton would read it as one, and no top-level domain is numeric.
func checkName(host string) string {
	if host == "" || len(host) > 253 {
		return ReasonBadRequest
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 {
			return ReasonBadRequest
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return ReasonBadRequest
			}
		}
	}
	last := host[strings.LastIndexByte(host, '.')+1:]
	if strings.HasPrefix(last, "0x") || strings.Trim(last, "0123456789") == "" {
		return ReasonIPLiteral
	}
	return ""
}

// allowed decides a normalised name against a policy.
func allowed(e backend.Egress, t target) string {
	if e.EffectiveMode() == backend.EgressNone {
		return ReasonModeNone
	}
	for _, entry := range e.Allow {
		if matchEntry(entry, t) {
			return ReasonOK
		}
	}
	return ReasonNotAllowed
}

// matchEntry matches one allow-list entry: "example.com" is that name,
// "*.example.com" any name strictly below it, ":port" restricts the port.
func matchEntry(entry string, t target) bool {
	name, port, hasPort := strings.Cut(entry, ":")
	if hasPort {
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || uint16(p) != t.port {
			return false
		}
	}
	if suffix, wild := strings.CutPrefix(name, "*"); wild {
		return len(t.host) > len(suffix) && strings.EqualFold(t.host[len(t.host)-len(suffix):], suffix)
	}
	return strings.EqualFold(t.host, name)
}

// refusedRanges are the ranges no name may resolve to, each with why: the
// one table of them (TestRefusedRanges tests each entry). IPv6 forms that
// embed an IPv4 address (mapped, NAT64, 6to4) are judged by that address
// (embeddedV4); the ones below are refused whatever they embed.
var refusedRanges = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, cloud metadata"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved, broadcast"},
	{netip.MustParsePrefix("::/96"), "unspecified, IPv4-compatible"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated (SIIT): reaches any IPv4 address through a translator"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001::/32"), "Teredo: tunnels to an IPv4 address hidden in the address"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (private)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// refusedAddr says whether a resolved address may not be dialled: it is in
// a refused range, or an IPv6 form (mapped, NAT64, 6to4) of a
// refused IPv4 address, and the operator's exceptions do not cover it.
func refusedAddr(a netip.Addr, exceptions []netip.Prefix) bool {
	a = a.WithZone("")
	for _, p := range exceptions {
		if p.Contains(a) || p.Contains(a.Unmap()) {
			return false
		}
	}
	if embedded, ok := embeddedV4(a); ok && refusedAddr(embedded, exceptions) {
		return true
	}
	a = a.Unmap()
	for _, r := range refusedRanges {
		if r.prefix.Contains(a) {
			return true
		}
	}
	return false
}

// embeddedV4 is the IPv4 address inside an IPv6 form that routes to it.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() || a.Is4In6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}
