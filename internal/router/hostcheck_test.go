package router

import (
	"net/http/httptest"
	"testing"
)

func TestHostCheck(t *testing.T) {
	h := newHostCheck("https://sandgate.example.org:8443/base", "sbx.example.org", []string{"gateway.internal", "[fd00::1]", "10.0.0.7"})
	cases := []struct {
		host, path string
		ok         bool
	}{
		{"localhost:8080", "/threads/t/v1/shell/exec", true},
		{"LOCALHOST", "/threads/t/v1/shell/exec", true},
		{"127.0.0.1:1", "/x", true},
		{"[::1]:8080", "/x", true},
		{"[::1]", "/x", true},
		{"sandgate.example.org", "/x", true},    // public_url's host, any port
		{"sandgate.example.org:80", "/x", true}, //
		{"0123456789abcdef.sbx.example.org", "/x", true},
		{"6080-0123456789abcdef.SBX.example.org:443", "/x", true},
		{"sbx.example.org", "/x", true},
		{"gateway.internal:8080", "/x", true}, // allowed_hosts
		{"[fd00::1]:8080", "/x", true},
		{"10.0.0.7:8080", "/x", true},
		{"evil.example", "/threads/t/v1/shell/exec", false},
		{"evil.example:8080", "/x", false},
		{"localhost.evil.example", "/x", false},
		{"evilsbx.example.org", "/x", false}, // not under the suffix
		{"127.0.0.2", "/x", false},
		{"10.0.0.8:8080", "/x", false},
		{"", "/x", false},
		{"[::1", "/x", false},
		{"evil.example", "/healthz", true}, // probes by IP or service name
		{"evil.example", "/readyz", true},
		{"evil.example", "/metrics", false},
		{"evil.example", "/healthz/x", false},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "http://x"+c.path, nil)
		r.Host = c.host
		if got := h.allows(r); got != c.ok {
			t.Errorf("Host %q path %s: allowed = %v, want %v", c.host, c.path, got, c.ok)
		}
	}
	if newHostCheck("", "", []string{"a", "*"}) != nil {
		t.Error("allowed_hosts * must turn the check off")
	}
	r := httptest.NewRequest("GET", "http://x/threads/t/v1/x", nil)
	r.Host = "gateway.internal:8080"
	if n := testing.AllocsPerRun(100, func() { h.allows(r) }); n != 0 {
		t.Errorf("the host check allocates %.0f times per request", n)
	}
}
