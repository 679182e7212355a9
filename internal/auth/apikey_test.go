package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func keyAuth(t testing.TB, keys ...APIKey) *Authenticator {
	t.Helper()
	a, err := New(t.Context(), Config{APIKeys: keys}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func request(hdr ...string) *http.Request {
	r, _ := http.NewRequest("GET", "http://gw/threads/t/v1/x", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	a := keyAuth(t,
		APIKey{Name: "alice", SHA256: hashOf("alice-key-0123456789"), Scopes: ScopeThreads},
		APIKey{Name: "ops", SHA256: hashOf("ops-key-0123456789"), Scopes: ScopeAdmin},
		APIKey{Name: "prom", SHA256: hashOf("prom-key-0123456789")},
	)
	long := strings.Repeat("k", maxKeyLen+1)
	cases := []struct {
		name      string
		hdr       []string
		apiHeader bool
		user      string
		threads   bool
		admin     bool
	}{
		{"bearer", []string{"Authorization", "Bearer alice-key-0123456789"}, false, "alice", true, false},
		{"scheme is case-insensitive", []string{"Authorization", "bearer  alice-key-0123456789 "}, false, "alice", true, false},
		{"admin includes threads", []string{"Authorization", "Bearer ops-key-0123456789"}, false, "ops", true, true},
		{"no scopes", []string{"Authorization", "Bearer prom-key-0123456789"}, false, "prom", false, false},
		{"X-API-Key on the provisioner API", []string{"X-API-Key", "alice-key-0123456789"}, true, "alice", true, false},
		{"X-API-Key elsewhere", []string{"X-API-Key", "alice-key-0123456789"}, false, "", false, false},
		{"unknown key", []string{"Authorization", "Bearer alice-key-0123456780"}, false, "", false, false},
		{"basic auth", []string{"Authorization", "Basic YWxpY2U6eA=="}, true, "", false, false},
		{"empty bearer", []string{"Authorization", "Bearer "}, false, "", false, false},
		{"a bad Authorization is not skipped for X-API-Key", []string{"Authorization", "Token x", "X-API-Key", "alice-key-0123456789"}, true, "", false, false},
		{"none", nil, true, "", false, false},
		{"too long for a key", []string{"Authorization", "Bearer " + long}, false, "", false, false},
		{"prefix of a key", []string{"Authorization", "Bearer alice-key"}, false, "", false, false},
	}
	for _, c := range cases {
		p, err := a.Authenticate(request(c.hdr...), c.apiHeader)
		if c.user == "" {
			if err == nil || !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: principal %v, err %v; want ErrUnauthenticated", c.name, p, err)
			}
			continue
		}
		if err != nil || p.User != c.user || p.Has(ScopeThreads) != c.threads || p.Has(ScopeAdmin) != c.admin {
			t.Errorf("%s: %+v %v", c.name, p, err)
		}
	}
}

func TestParseAPIKeys(t *testing.T) {
	t.Parallel()
	h1, h2 := hashOf("one"), hashOf("two")
	keys, err := ParseAPIKeys("alice=" + h1 + ", ops@corp=" + strings.ToUpper(h2) + ":threads+admin,prom=" + h1[:63] + "0:")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || keys[0].Name != "alice" || keys[0].Scopes != ScopeThreads ||
		keys[1].Name != "ops@corp" || keys[1].SHA256 != h2 || !NewPrincipal("", keys[1].Scopes, nil).Has(ScopeAdmin) ||
		keys[2].Scopes != 0 {
		t.Fatalf("keys = %+v", keys)
	}
	back, err := ParseAPIKeys(FormatAPIKeys(keys))
	if err != nil || len(back) != 3 || back[1] != keys[1] || back[2] != keys[2] {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	for _, bad := range []string{
		"alice",                            // no hash
		"alice=abc",                        // short hash
		"a/b=" + h1,                        // not a user name
		"alice=" + h1 + ":root",            // unknown scope
		"alice=" + strings.Repeat("z", 64), // not hex
	} {
		if _, err := ParseAPIKeys(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "alice=abc") {
			t.Errorf("%q: the error repeats the entry: %v", bad, err)
		}
	}
	if err := (Config{APIKeys: []APIKey{{Name: "a", SHA256: h1}, {Name: "b", SHA256: h1}}}).Validate(); err == nil {
		t.Error("a hash listed twice was accepted")
	}
}

func TestAPIKeyCheckDoesNotAllocate(t *testing.T) {
	keys := make([]APIKey, 0, 20)
	for i := range 20 {
		keys = append(keys, APIKey{Name: "user" + string(rune('a'+i)), SHA256: hashOf("key-" + string(rune('a'+i)) + strings.Repeat("x", 40)), Scopes: ScopeThreads})
	}
	a := keyAuth(t, keys...)
	r := request("Authorization", "Bearer key-k"+strings.Repeat("x", 40))
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := a.Authenticate(r, false)
		if err != nil || p.User != "userk" {
			t.Fatal(p, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("an API key check allocates %.1f times", allocs)
	}
}

func BenchmarkAPIKey(b *testing.B) {
	a := keyAuth(b, APIKey{Name: "alice", SHA256: hashOf("alice-key-0123456789abcdef0123456789abcdef"), Scopes: ScopeThreads})
	r := request("Authorization", "Bearer alice-key-0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	for range b.N {
		if _, err := a.Authenticate(r, false); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPrincipalThreadPatterns(t *testing.T) {
	t.Parallel()
	p := NewPrincipal("u", ScopeThreads, []string{"proj-*", "exact", "x?"})
	for thread, want := range map[string]bool{
		"proj-1": true, "proj-": true, "exact": true, "x1": true, "x12": false, "exact2": false, "other": false,
	} {
		if p.MayOpen(thread) != want {
			t.Errorf("MayOpen(%q) = %v", thread, !want)
		}
	}
	if !NewPrincipal("u", ScopeThreads, nil).MayOpen("anything") || NewPrincipal("u", ScopeThreads, []string{}).MayOpen("a") {
		t.Error("nil patterns must allow every thread, an empty list none")
	}
	if !Local().Has(ScopeAdmin|ScopeThreads) || Local().User != "default" {
		t.Errorf("local principal: %+v", Local())
	}
}
