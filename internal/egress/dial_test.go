package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
)

// A name with several checked addresses is served by the first that
// answers: one refusing address must not fail the request while the
// dial's time is not up.
func TestDialTriesTheNextAddress(t *testing.T) {
	t.Parallel()
	var tried []string
	p, err := New(Config{Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
		tried = append(tried, addr)
		if addr == "192.0.2.1:443" {
			return nil, errors.New("connection refused")
		}
		client, server := net.Pipe()
		server.Close()
		return client, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{t: target{host: "a.example", port: 443},
		addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}}
	c, err := p.dial(context.Background(), x)
	if err != nil {
		t.Fatalf("dial: %v (tried %v)", err, tried)
	}
	c.Close()
	if want := []string{"192.0.2.1:443", "192.0.2.2:443"}; !slices.Equal(tried, want) {
		t.Fatalf("tried %v, want %v", tried, want)
	}
}
