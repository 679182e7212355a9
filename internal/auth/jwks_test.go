package auth

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer serves a key set the test can swap, counting fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []map[string]string
	fetches atomic.Int32
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(keys ...map[string]string) {
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": enc(k.N.Bytes()), "e": enc(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]string {
	b, err := k.Bytes() // 0x04 || x || y
	if err != nil {
		panic(err)
	}
	return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": enc(b[1:33]), "y": enc(b[33:])}
}

func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	k := testKeys()
	srv := newJWKSServer(t)
	srv.serve(rsaJWK("a", &k.rsa.PublicKey), ecJWK("e", &k.ec.PublicKey),
		map[string]string{"kty": "oct", "kid": "sym", "k": "c2VjcmV0"}, // symmetric keys are never taken from a JWKS
		map[string]string{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"})
	a := jwtAuth(t, JWTConfig{JWKSURL: srv.URL, AnyAudience: true})
	a.jwt.jwks.now = func() time.Time { return now }
	a.jwt.jwks.minRefresh = 0
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	check := func(name, token, want string) {
		t.Helper()
		p, err := a.Authenticate(request("Authorization", "Bearer "+token), false)
		if want == "" {
			if err == nil {
				t.Errorf("%s: accepted as %s", name, p.User)
			}
			return
		}
		if err != nil || p.User != want {
			t.Errorf("%s: %v %v", name, p, err)
		}
	}
	check("RS256 kid a", sign(t, jwt.SigningMethodRS256, k.rsa, base(), "kid", "a"), "carol")
	check("ES256 kid e", sign(t, jwt.SigningMethodES256, k.ec, base("sub", "erin"), "kid", "e"), "erin")
	check("no kid: any key of the alg", sign(t, jwt.SigningMethodRS256, k.rsa, base("sub", "nokid")), "nokid")
	check("kid a with an ES256 alg", sign(t, jwt.SigningMethodES256, k.ec, base("sub", "x"), "kid", "a"), "")
	check("HS256 keyed with a JWKS modulus", sign(t, jwt.SigningMethodHS256, k.rsa.N.Bytes(), base("sub", "y"), "kid", "a"), "")
	before := srv.fetches.Load()

	// The issuer rotates to key b: a token with the new kid triggers one
	// refresh and passes; new tokens of the retired key fail.
	srv.serve(rsaJWK("b", &k.rsa2.PublicKey))
	check("RS256 kid b after rotation", sign(t, jwt.SigningMethodRS256, k.rsa2, base("sub", "bob"), "kid", "b"), "bob")
	if n := srv.fetches.Load(); n != before+1 {
		t.Errorf("%d fetches for one unknown kid, want 1", n-before)
	}
	check("retired key a", sign(t, jwt.SigningMethodRS256, k.rsa, base("sub", "late"), "kid", "a"), "")
	check("key b's kid on key a's signature", sign(t, jwt.SigningMethodRS256, k.rsa, base("sub", "forged"), "kid", "b"), "")

	// Unknown kids refresh at most once per minRefresh.
	a.jwt.jwks.minRefresh = time.Hour
	before = srv.fetches.Load()
	for i := range 20 {
		check("made-up kid", sign(t, jwt.SigningMethodRS256, k.rsa, base("sub", "x"), "kid", "nope-"+string(rune('a'+i))), "")
	}
	if n := srv.fetches.Load(); n != before {
		t.Errorf("%d fetches for made-up kids within minRefresh", n-before)
	}
}

func TestJWKSDownAtStartIsRetried(t *testing.T) {
	t.Parallel()
	k := testKeys()
	srv := newJWKSServer(t) // serves an empty set: unusable
	a := jwtAuth(t, JWTConfig{JWKSURL: srv.URL, AnyAudience: true})
	a.jwt.jwks.minRefresh = 0
	tok := sign(t, jwt.SigningMethodRS256, k.rsa, base(), "kid", "a")
	if _, err := a.Authenticate(request("Authorization", "Bearer "+tok), false); err == nil {
		t.Fatal("accepted without keys")
	}
	srv.serve(rsaJWK("a", &k.rsa.PublicKey))
	if p, err := a.Authenticate(request("Authorization", "Bearer "+tok), false); err != nil || p.User != "carol" {
		t.Fatalf("after the JWKS came up: %v %v", p, err)
	}
}
