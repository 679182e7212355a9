package remote

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// A provisioner's answer is not trusted to steer the gateway: the
// sandbox_url it returns is where the gateway then sends every client
// request of that sandbox (with the provisioner's key when it is the
// provisioner's own origin), so it is checked before anything connects to
// it. A provisioner may be another operator's service, or DeerFlow's, whose
// answers a tenant can sometimes shape.

// errSandboxURL wraps every refusal of a sandbox_url.
var errSandboxURL = errors.New("provisioner returned an unsafe sandbox_url")

// metadataAddrs are cloud instance-metadata and host-agent endpoints
// outside the link-local range (which is refused as a whole): AWS's IPv6
// IMDS, Alibaba's metadata service, Azure's wire server.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
}

// metadataNames are metadata services' DNS names (a name that resolves to
// one of the addresses otherwise is not looked up here).
var metadataNames = []string{"metadata.google.internal", "metadata.goog", "metadata"}

// thisNetwork is 0.0.0.0/8: "this host" to the kernel, so 0.0.0.1 reaches
// loopback on Linux like 0.0.0.0 does.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// checkSandboxURL refuses a sandbox_url that is not a plain http(s) origin
// with an optional clean path: userinfo, a query or fragment (the client's
// path and query are appended to it), a path that is not plain segments
// (dot segments, percent-encoding, backslashes), an address the gateway
// must never be steered to (unspecified, this-network, link-local,
// multicast, metadata), or a host other than the provisioner's own
// (provisionerHost) and the configured extra hosts (allowed; "*" = any).
func checkSandboxURL(raw, provisionerHost string, allowed []string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Opaque != "" || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%w: want an http(s) URL", errSandboxURL)
	case u.User != nil:
		return fmt.Errorf("%w: it carries userinfo", errSandboxURL)
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(raw, "#"):
		return fmt.Errorf("%w: it carries a query or fragment", errSandboxURL)
	case !plainPath(u.EscapedPath()):
		return fmt.Errorf("%w: its path is not plain segments (no dot segments, escapes or backslashes)", errSandboxURL)
	}
	host := strings.ToLower(u.Hostname())
	if err := checkHost(host); err != nil {
		return err
	}
	if strings.EqualFold(host, provisionerHost) {
		return nil
	}
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(a, host) {
			return nil
		}
	}
	return fmt.Errorf("%w: host %q is neither the provisioner's nor in provisioner_sandbox_hosts", errSandboxURL, host)
}

// checkHost refuses addresses and names no sandbox lives at.
func checkHost(host string) error {
	for _, n := range metadataNames {
		if strings.TrimSuffix(host, ".") == n {
			return fmt.Errorf("%w: %q is a metadata service", errSandboxURL, host)
		}
	}
	if strings.Contains(host, "%") {
		return fmt.Errorf("%w: an IPv6 zone", errSandboxURL)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return nil // a name
	}
	addr = addr.Unmap()
	switch {
	case addr.IsUnspecified() || thisNetwork.Contains(addr):
		return fmt.Errorf("%w: unspecified address %s", errSandboxURL, addr)
	case addr.IsLinkLocalUnicast():
		return fmt.Errorf("%w: link-local address %s (metadata services live there)", errSandboxURL, addr)
	case addr.IsMulticast():
		return fmt.Errorf("%w: multicast address %s", errSandboxURL, addr)
	}
	for _, m := range metadataAddrs {
		if addr == m {
			return fmt.Errorf("%w: %s is a metadata service", errSandboxURL, addr)
		}
	}
	return nil
}

// plainPath: empty, or "/"-separated segments of unreserved characters,
// none of them "." or ".." (an optional trailing slash).
func plainPath(p string) bool {
	if p == "" || p == "/" {
		return true
	}
	if p[0] != '/' {
		return false
	}
	for i, seg := range strings.Split(p[1:], "/") {
		if seg == "" && i == strings.Count(p[1:], "/") { // the trailing slash
			continue
		}
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~", c)) {
				return false
			}
		}
	}
	return true
}
