// Package egresstest has test helpers for the egress proxy: a DNS server on
// loopback whose answers the test decides (egress.Config.DNSServer).
package egresstest

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// StartDNS serves names (without or with the trailing dot, any case) on a
// UDP port of 127.0.0.1 until the test ends, and returns its "ip:port". A
// name gets its address as an A or AAAA answer, nothing for the other type;
// any other name is NXDOMAIN.
func StartDNS(t testing.TB, names map[string]netip.Addr) string {
	t.Helper()
	zone := make(map[string]netip.Addr, len(names))
	for n, a := range names {
		zone[strings.ToLower(strings.TrimSuffix(n, "."))+"."] = a
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dns: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			if reply, ok := answer(zone, buf[:n]); ok {
				pc.WriteTo(reply, from) //nolint:errcheck // the resolver retries
			}
		}
	}()
	return pc.LocalAddr().String()
}

// answer builds the reply to one query; false drops a query it cannot parse.
func answer(zone map[string]netip.Addr, query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	addr, known := zone[strings.ToLower(q.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	res := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	switch {
	case known && q.Type == dnsmessage.TypeA && addr.Is4():
		err = b.AResource(res, dnsmessage.AResource{A: addr.As4()})
	case known && q.Type == dnsmessage.TypeAAAA && addr.Is6():
		err = b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: addr.As16()})
	}
	if err != nil {
		return nil, false
	}
	reply, err := b.Finish()
	return reply, err == nil
}
