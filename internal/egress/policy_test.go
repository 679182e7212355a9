package egress

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/telemetry"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	// DNS's limits: 63 bytes a label, 253 a name.
	label63 := strings.Repeat("a", 63)
	name253 := label63 + "." + label63 + "." + label63 + "." + strings.Repeat("b", 61)
	for _, c := range []struct {
		authority   string
		defaultPort uint16
		host        string
		port        uint16
		reason      string
	}{
		{"example.com", 80, "example.com", 80, ""},
		{"Example.COM.:8080", 80, "example.com", 8080, ""},
		{"example.com:443", 0, "example.com", 443, ""},
		{"example.com", 0, "example.com", 0, ReasonBadRequest}, // CONNECT needs a port
		{"example.com:0", 80, "example.com", 80, ReasonBadRequest},
		{"example.com:65536", 80, "example.com", 80, ReasonBadRequest},
		{"example.com:http", 80, "example.com", 80, ReasonBadRequest},
		{"example.com:-1", 80, "example.com", 80, ReasonBadRequest},
		{"exa mple.com", 80, "exa mple.com", 80, ReasonBadRequest},
		{"a..b", 80, "a..b", 80, ReasonBadRequest},
		{"", 80, "", 80, ReasonBadRequest},
		{"é.example", 80, "é.example", 80, ReasonBadRequest},
		{"127.0.0.1", 80, "127.0.0.1", 80, ReasonIPLiteral},
		{"127.0.0.1:22", 80, "127.0.0.1", 22, ReasonIPLiteral},
		{"[::1]", 80, "[::1]", 80, ReasonIPLiteral},
		{"[::1]:443", 0, "::1", 443, ReasonIPLiteral},
		{"[::ffff:169.254.169.254]:80", 0, "::ffff:169.254.169.254", 80, ReasonIPLiteral},
		{"[fe80::1%25eth0]:80", 0, "fe80::1%25eth0", 80, ReasonIPLiteral},
		{"::1:443", 0, "::1:443", 0, ReasonBadRequest},
		{"127.1", 80, "127.1", 80, ReasonIPLiteral},
		{"2130706433", 80, "2130706433", 80, ReasonIPLiteral},
		{"0x7f.1", 80, "0x7f.1", 80, ReasonIPLiteral},
		{"1.2.3.example", 80, "1.2.3.example", 80, ""},
		{"z9.example", 80, "z9.example", 80, ""},
		{":80", 80, "", 80, ReasonBadRequest},
		{label63 + ".example", 80, label63 + ".example", 80, ""},
		{label63 + "a.example", 80, label63 + "a.example", 80, ReasonBadRequest},
		{name253, 80, name253, 80, ""},
		{name253 + "b", 80, name253 + "b", 80, ReasonBadRequest},
	} {
		tg, reason := parseTarget(c.authority, c.defaultPort)
		if reason != c.reason || tg.host != c.host || reason == "" && tg.port != c.port {
			t.Errorf("parseTarget(%q, %d) = %+v %q, want host %q port %d %q", c.authority, c.defaultPort, tg, reason, c.host, c.port, c.reason)
		}
	}
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	allow := []string{"example.com", "*.Svc.Example.org", "api.example.net:8443", "*.wild.test:443"}
	proxy := backend.Egress{Allow: allow}
	for _, c := range []struct {
		egress backend.Egress
		host   string
		port   uint16
		want   string
	}{
		{proxy, "example.com", 80, ReasonOK},
		{proxy, "example.com", 1234, ReasonOK}, // no port: any port
		{proxy, "www.example.com", 80, ReasonNotAllowed},
		{proxy, "notexample.com", 80, ReasonNotAllowed},
		{proxy, "a.svc.example.org", 443, ReasonOK},
		{proxy, "a.b.svc.example.org", 443, ReasonOK},
		{proxy, "svc.example.org", 443, ReasonNotAllowed}, // not the apex
		{proxy, "xsvc.example.org", 443, ReasonNotAllowed},
		{proxy, "api.example.net", 8443, ReasonOK},
		{proxy, "api.example.net", 443, ReasonNotAllowed},
		{proxy, "x.wild.test", 443, ReasonOK},
		{proxy, "x.wild.test", 80, ReasonNotAllowed},
		{backend.Egress{Mode: backend.EgressOpen, Allow: allow}, "example.com", 80, ReasonOK},
		{backend.Egress{Mode: backend.EgressOpen}, "example.com", 80, ReasonNotAllowed},
		{backend.Egress{Mode: backend.EgressNone, Allow: allow}, "example.com", 80, ReasonModeNone},
		{backend.Egress{}, "example.com", 80, ReasonNotAllowed},
	} {
		if got := allowed(c.egress, target{c.host, c.port}); got != c.want {
			t.Errorf("allowed(%+v, %s:%d) = %q, want %q", c.egress, c.host, c.port, got, c.want)
		}
	}
}

func TestRefusedAddr(t *testing.T) {
	t.Parallel()
	mirror := []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24"), netip.MustParsePrefix("127.0.0.2/32")}
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"93.184.215.14", false}, {"8.8.8.8", false}, {"2606:4700::1111", false},
		{"127.0.0.1", true}, {"127.255.0.9", true}, {"10.0.0.1", true}, {"172.16.0.1", true}, {"172.31.255.255", true},
		{"172.32.0.1", false}, {"192.168.1.1", true}, {"169.254.169.254", true}, {"100.64.0.1", true},
		{"100.127.255.255", true}, {"100.128.0.1", false}, {"0.0.0.0", true}, {"0.1.2.3", true},
		{"192.0.0.170", true}, {"198.18.0.1", true}, {"198.19.255.1", true}, {"224.0.0.251", true},
		{"239.255.255.250", true}, {"240.0.0.1", true}, {"255.255.255.255", true},
		{"::", true}, {"::1", true}, {"fc00::1", true}, {"fd12:3456::1", true}, {"fe80::1", true},
		{"fe80::1%eth0", true}, {"ff02::1", true}, {"::ffff:127.0.0.1", true}, {"::ffff:169.254.169.254", true},
		{"::ffff:8.8.8.8", false}, {"::127.0.0.1", true}, {"64:ff9b::a9fe:a9fe", true}, {"64:ff9b::808:808", false},
		{"64:ff9b:1::808:808", true}, {"2002:7f00:1::1", true}, {"2002:808:808::1", false},
		// The operator's exceptions, in every form.
		{"10.1.2.3", false}, {"10.1.3.3", true}, {"127.0.0.2", false}, {"::ffff:127.0.0.2", false},
		{"64:ff9b::7f00:2", false},
	} {
		if got := refusedAddr(netip.MustParseAddr(c.addr), mirror); got != c.want {
			t.Errorf("refusedAddr(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// TestRefusedRanges tests each entry of the one table of refused ranges:
// an address inside it (its first, its last and the sample below) is
// refused, and every entry has its sample here, so a range added without
// a test, or a sample whose range was dropped, fails.
func TestRefusedRanges(t *testing.T) {
	t.Parallel()
	samples := map[string]string{
		"0.0.0.0/8": "0.1.2.3", "10.0.0.0/8": "10.20.30.40", "100.64.0.0/10": "100.100.100.100",
		"127.0.0.0/8": "127.0.0.53", "169.254.0.0/16": "169.254.169.254", "172.16.0.0/12": "172.20.0.1",
		"192.0.0.0/24": "192.0.0.170", "192.0.2.0/24": "192.0.2.1", "192.88.99.0/24": "192.88.99.1",
		"192.168.0.0/16": "192.168.1.1", "198.18.0.0/15": "198.19.0.1", "198.51.100.0/24": "198.51.100.7",
		"203.0.113.0/24": "203.0.113.9", "224.0.0.0/4": "239.255.255.250", "240.0.0.0/4": "255.255.255.255",
		"::/96": "::7f00:1", "::1/128": "::1",
		"::ffff:0:0:0/96": "::ffff:0:808:808",
		"64:ff9b:1::/48":  "64:ff9b:1::808:808",
		"100::/64":        "100::1",
		"2001::/32":       "2001:0:4136:e378:8000:63bf:3fff:fdd2",
		"2001:db8::/32":   "2001:db8::1",
		"3fff::/20":       "3fff:fff::1",
		"fc00::/7":        "fd12:3456::1",
		"fe80::/10":       "fe80::1",
		"fec0::/10":       "fec0::1",
		"ff00::/8":        "ff02::1",
	}
	if len(samples) != len(refusedRanges) {
		t.Errorf("%d samples for %d refused ranges", len(samples), len(refusedRanges))
	}
	for _, r := range refusedRanges {
		t.Run(r.prefix.String(), func(t *testing.T) {
			t.Parallel()
			raw, ok := samples[r.prefix.String()]
			if !ok {
				t.Fatalf("refused range %s (%s) has no test sample", r.prefix, r.why)
			}
			for _, a := range []netip.Addr{netip.MustParseAddr(raw), r.prefix.Masked().Addr(), lastOf(r.prefix)} {
				if !r.prefix.Contains(a) {
					t.Fatalf("%s is not in %s", a, r.prefix)
				}
				if !refusedAddr(a, nil) {
					t.Errorf("%s (%s, %s) is not refused", a, r.prefix, r.why)
				}
			}
		})
	}
	for _, public := range []string{"2001:4860:4860::8888", "2606:4700::1111", "8.8.8.8", "::ffff:8.8.8.8", "64:ff9b::808:808"} {
		if refusedAddr(netip.MustParseAddr(public), nil) {
			t.Errorf("public %s is refused", public)
		}
	}
}

// lastOf is the last address of p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"dns server", Config{DNSServer: "127.0.0.1:53"}, true},
		{"dns server name", Config{DNSServer: "dns.local:53"}, false},
		{"dns server without port", Config{DNSServer: "127.0.0.1"}, false},
		{"resolver and dns server", Config{DNSServer: "127.0.0.1:53", Resolver: fakeResolver{}}, false},
		{"unmasked prefix", Config{AllowAddresses: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/24")}}, false},
		{"zero prefix", Config{AllowAddresses: []netip.Prefix{{}}}, false},
		{"negative timeout", Config{IdleTimeout: -time.Second}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", c.name, err, c.ok)
		}
	}
	d := Config{}.withDefaults()
	if d.DialTimeout != DefaultDialTimeout || d.IdleTimeout != DefaultIdleTimeout || d.Resolver == nil || d.Dial == nil || d.Log == nil || d.Recorder == nil {
		t.Fatalf("defaults not applied: %+v", d)
	}
}

var _ Recorder = (*telemetry.Metrics)(nil)

// Every reason this package records has its own pre-created series, so none
// lands in "other".
func TestReasonsHaveSeries(t *testing.T) {
	t.Parallel()
	m := telemetry.NewMetrics()
	for _, r := range []string{ReasonNotAllowed, ReasonModeNone, ReasonIPLiteral, ReasonPrivateAddress, ReasonResolveFailed,
		ReasonBadRequest, ReasonDialFailed, ReasonUpstreamFailed, ReasonUnauthorized, ReasonNotTLS, ReasonNoSNI, ReasonSNIMismatch} {
		m.EgressDecision(false, r)
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sandgate_egress_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			decision, reason := s.GetLabel()[0].GetValue(), s.GetLabel()[1].GetValue()
			want := 1.0
			if reason == "other" || decision == "allow" {
				want = 0
			}
			if s.GetCounter().GetValue() != want {
				t.Errorf("%s/%s = %v, want %v", decision, reason, s.GetCounter().GetValue(), want)
			}
		}
		return
	}
	t.Fatal("no sandgate_egress_requests_total")
}
