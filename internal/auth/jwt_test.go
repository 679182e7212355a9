package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const hsSecret = "0123456789abcdef0123456789abcdef-test-secret"

// testKeys are made once: RSA key generation is slow under -race.
var testKeys = sync.OnceValue(func() struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
	small     *rsa.PrivateKey
} {
	gen := func(bits int) *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			panic(err)
		}
		return k
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return struct {
		rsa, rsa2 *rsa.PrivateKey
		ec        *ecdsa.PrivateKey
		small     *rsa.PrivateKey
	}{gen(2048), gen(2048), ec, gen(1024)}
})

// now is the verifier's clock in these tests.
var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func sign(t testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims, hdr ...string) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for i := 0; i+1 < len(hdr); i += 2 {
		tok.Header[hdr[i]] = hdr[i+1]
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// base are valid claims at now.
func base(extra ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "carol", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	for i := 0; i+1 < len(extra); i += 2 {
		k := extra[i].(string)
		if extra[i+1] == nil {
			delete(c, k)
			continue
		}
		c[k] = extra[i+1]
	}
	return c
}

func writePEM(t testing.TB, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pkix(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func jwtAuth(t testing.TB, cfg JWTConfig) *Authenticator {
	t.Helper()
	a, err := New(t.Context(), Config{JWT: cfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.jwt.now = func() time.Time { return now }
	return a
}

func TestJWT(t *testing.T) {
	t.Parallel()
	k := testKeys()
	rsaFile := writePEM(t, "PUBLIC KEY", pkix(t, &k.rsa.PublicKey))
	ecFile := writePEM(t, "PUBLIC KEY", pkix(t, &k.ec.PublicKey))
	hs := jwtAuth(t, JWTConfig{HS256Secret: hsSecret, Leeway: 30 * time.Second, AnyAudience: true})
	rs := jwtAuth(t, JWTConfig{PublicKeyFile: rsaFile, AnyAudience: true})
	es := jwtAuth(t, JWTConfig{PublicKeyFile: ecFile, AnyAudience: true})
	pinned := jwtAuth(t, JWTConfig{HS256Secret: hsSecret, Issuer: "https://idp.example", Audience: "sandgate"})
	rsaPEM, _ := os.ReadFile(rsaFile)
	rsAndHS := jwtAuth(t, JWTConfig{PublicKeyFile: rsaFile, HS256Secret: hsSecret, AnyAudience: true})
	role := jwtAuth(t, JWTConfig{HS256Secret: hsSecret, Audience: "sandgate", AdminClaim: "sandgate_role", AdminValue: "admin"})
	nested := jwtAuth(t, JWTConfig{HS256Secret: hsSecret, Audience: "sandgate", AdminClaim: "realm_access.roles", AdminValue: "sandgate-admin"})
	aud := func(extra ...any) jwt.MapClaims { return base(append([]any{"aud", "sandgate"}, extra...)...) }

	cases := []struct {
		name  string
		a     *Authenticator
		token string
		user  string // "" = refused
		admin bool
	}{
		{"hs256", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base()), "carol", false},
		// scope admin is no admin marker: only the configured claim is.
		{"scope admin without an admin claim configured", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("scope", "openid admin")), "carol", false},
		{"scope admin list without an admin claim configured", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("scope", []string{"admin"})), "carol", false},
		{"scope admin but not the admin claim", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("scope", "admin")), "carol", false},
		{"admin claim with another value", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("sandgate_role", "user")), "carol", false},
		{"admin claim", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("sandgate_role", "admin")), "carol", true},
		{"admin claim as a list", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("sandgate_role", []string{"x", "admin"})), "carol", true},
		{"admin claim as words", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("sandgate_role", "x admin")), "carol", true},
		{"admin value as a prefix is not it", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("sandgate_role", "administrator")), "carol", false},
		{"nested admin claim", nested, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("realm_access", map[string]any{"roles": []string{"sandgate-admin"}})), "carol", true},
		{"nested admin claim elsewhere", nested, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), aud("roles", []string{"sandgate-admin"})), "carol", false},
		{"admin claim without the audience", role, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("sandgate_role", "admin")), "", false},
		{"expired", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("exp", now.Add(-time.Minute).Unix())), "", false},
		{"expired within leeway", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("exp", now.Add(-10*time.Second).Unix())), "carol", false},
		{"not yet valid", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("nbf", now.Add(time.Minute).Unix())), "", false},
		{"no exp", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("exp", nil)), "", false},
		{"missing sub", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("sub", nil)), "", false},
		{"sub not a user name", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("sub", "../root")), "", false},
		{"wrong secret", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret+"x"), base()), "", false},
		{"HS384 not allowed", hs, sign(t, jwt.SigningMethodHS384, []byte(hsSecret), base()), "", false},
		{"alg none", hs, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, base()), "", false},
		{"RS256 without a public key", hs, sign(t, jwt.SigningMethodRS256, k.rsa, base()), "", false},
		{"rs256", rs, sign(t, jwt.SigningMethodRS256, k.rsa, base()), "carol", false},
		{"rs256 wrong key", rs, sign(t, jwt.SigningMethodRS256, k.rsa2, base()), "", false},
		{"PS256 refused", rs, sign(t, jwt.SigningMethodPS256, k.rsa, base()), "", false},
		{"HS256 keyed with the RSA public key (alg confusion)", rs, sign(t, jwt.SigningMethodHS256, rsaPEM, base()), "", false},
		{"alg confusion with a secret also set", rsAndHS, sign(t, jwt.SigningMethodHS256, rsaPEM, base()), "", false},
		{"ES256 on an RSA key", rs, sign(t, jwt.SigningMethodES256, k.ec, base()), "", false},
		{"es256", es, sign(t, jwt.SigningMethodES256, k.ec, base()), "carol", false},
		{"RS256 on an EC key", es, sign(t, jwt.SigningMethodRS256, k.rsa, base()), "", false},
		{"issuer and audience", pinned, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("iss", "https://idp.example", "aud", "sandgate")), "carol", false},
		{"audience in a list", pinned, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("iss", "https://idp.example", "aud", []string{"x", "sandgate"})), "carol", false},
		{"wrong issuer", pinned, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("iss", "https://evil.example", "aud", "sandgate")), "", false},
		{"wrong audience", pinned, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("iss", "https://idp.example", "aud", "other")), "", false},
		{"missing audience", pinned, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("iss", "https://idp.example")), "", false},
		{"bad threads pattern", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("threads", []string{"["})), "", false},
		{"threads not strings", hs, sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("threads", 7)), "", false},
		{"garbage", hs, "a.b.c", "", false},
	}
	for _, c := range cases {
		p, err := c.a.Authenticate(request("Authorization", "Bearer "+c.token), false)
		if c.user == "" {
			if err == nil || !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: accepted as %+v (%v)", c.name, p, err)
			}
			continue
		}
		if err != nil || p.User != c.user || !p.Has(ScopeThreads) || p.Has(ScopeAdmin) != c.admin {
			t.Errorf("%s: %+v, %v", c.name, p, err)
		}
	}
}

func TestJWTThreadsClaim(t *testing.T) {
	t.Parallel()
	a := jwtAuth(t, JWTConfig{HS256Secret: hsSecret, AnyAudience: true})
	cases := []struct {
		claim any
		open  map[string]bool
	}{
		{nil, map[string]bool{"anything": true}},
		{[]string{"proj-*", "t1"}, map[string]bool{"proj-a": true, "t1": true, "t2": false, "other": false}},
		{"proj-* t?", map[string]bool{"proj-x": true, "t9": true, "t10": false}},
		{[]string{}, map[string]bool{"t1": false}},
	}
	for _, c := range cases {
		tok := sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("threads", c.claim))
		p, err := a.Authenticate(request("Authorization", "Bearer "+tok), false)
		if err != nil {
			t.Fatalf("threads %v: %v", c.claim, err)
		}
		for thread, want := range c.open {
			if p.MayOpen(thread) != want {
				t.Errorf("threads %v: MayOpen(%q) = %v", c.claim, thread, !want)
			}
		}
	}
}

func TestJWTCacheHonoursExpiry(t *testing.T) {
	a := jwtAuth(t, JWTConfig{HS256Secret: hsSecret, AnyAudience: true})
	clock := now
	a.jwt.now = func() time.Time { return clock }
	tok := sign(t, jwt.SigningMethodHS256, []byte(hsSecret), base("exp", now.Add(90*time.Second).Unix()))
	r := request("Authorization", "Bearer "+tok)
	if _, err := a.Authenticate(r, false); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.Authenticate(r, false); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a cached token check allocates %.1f times", allocs)
	}
	clock = now.Add(2 * time.Minute)
	if _, err := a.Authenticate(r, false); err == nil {
		t.Fatal("an expired token was served from the cache")
	}
}

func TestJWTConfigValidation(t *testing.T) {
	t.Parallel()
	k := testKeys()
	for name, cfg := range map[string]JWTConfig{
		"short secret":              {HS256Secret: "short"},
		"jwks not http":             {JWKSURL: "file:///etc/keys"},
		"issuer without a key":      {Issuer: "x", AnyAudience: true},
		"no audience, no opt-out":   {HS256Secret: hsSecret},
		"audience and opt-out":      {HS256Secret: hsSecret, Audience: "a", AnyAudience: true},
		"admin claim without value": {HS256Secret: hsSecret, AnyAudience: true, AdminClaim: "role"},
		"admin value without claim": {HS256Secret: hsSecret, AnyAudience: true, AdminValue: "admin"},
		"negative leeway":           {HS256Secret: hsSecret, Leeway: -time.Second, AnyAudience: true},
		"small RSA key":             {PublicKeyFile: writePEM(t, "PUBLIC KEY", pkix(t, &k.small.PublicKey))},
		"not PEM":                   {PublicKeyFile: writePEM(t, "PRIVATE KEY", []byte("x"))},
		"missing public key file":   {PublicKeyFile: filepath.Join(t.TempDir(), "none.pem")},
		"P-384 key not accepted":    {PublicKeyFile: writePEM(t, "PUBLIC KEY", pkix(t, p384(t)))},
		"private key given by err":  {PublicKeyFile: writePEM(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k.small))},
	} {
		if _, err := New(t.Context(), Config{JWT: cfg}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// PKCS#1 and certificate forms are read too.
	if _, err := New(t.Context(), Config{JWT: JWTConfig{PublicKeyFile: writePEM(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)), AnyAudience: true}}, nil); err != nil {
		t.Errorf("PKCS#1 public key: %v", err)
	}
}

func p384(t testing.TB) *ecdsa.PublicKey {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &k.PublicKey
}
