package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
)

// The Dialer is the policy's one gate for connections the gateway makes
// itself (webhooks): an address in a refused range, given as a literal or
// as what a name resolves to at dial time (a rebinding name's second
// answer), is refused with a *RefusedError before anything is dialled;
// the operator's exceptions let one through.
func TestDialerRefusesBeforeDialling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		addr    string
		resolve []netip.Addr
		allow   []netip.Prefix
		refused bool
	}{
		{"loopback literal", "127.0.0.1:8080", nil, nil, true},
		{"metadata literal", "169.254.169.254:80", nil, nil, true},
		{"private literal", "10.1.2.3:443", nil, nil, true},
		{"v6 loopback", "[::1]:80", nil, nil, true},
		{"mapped loopback", "[::ffff:127.0.0.1]:80", nil, nil, true},
		{"name rebound to loopback", "hooks.example:443", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil, true},
		{"one bad answer of two", "hooks.example:443", []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.1")}, nil, true},
		{"allow-listed loopback", "127.0.0.1:8080", nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false},
		{"public name", "hooks.example:443", []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var dials atomic.Int32
			d, err := NewDialer(Config{Resolver: fakeResolver(tc.resolve), AllowAddresses: tc.allow,
				Dial: func(context.Context, string, string) (net.Conn, error) {
					dials.Add(1)
					return nil, errors.New("test dial: never connects")
				}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.DialContext(context.Background(), "tcp", tc.addr)
			refused, isRefused := errors.AsType[*RefusedError](err)
			if tc.refused {
				if !isRefused || dials.Load() != 0 {
					t.Fatalf("%s: err %v, %d dials; want a RefusedError and none", tc.addr, err, dials.Load())
				}
				if !refused.Addr.IsValid() {
					t.Fatalf("refusal names no address: %v", err)
				}
				return
			}
			if isRefused || dials.Load() != 1 {
				t.Fatalf("%s: err %v, %d dials; want one dial", tc.addr, err, dials.Load())
			}
		})
	}
}
