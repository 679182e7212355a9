package auth

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sandgate/sandgate/internal/identity"
)

// FuzzCredential feeds arbitrary Authorization and X-API-Key values (API
// keys, JWTs, garbage) to an authenticator with both kinds configured: no
// panic, and either a principal with a usable user name or ErrUnauthenticated.
func FuzzCredential(f *testing.F) {
	a, err := New(f.Context(), Config{
		APIKeys: []APIKey{{Name: "alice", SHA256: hashOf("alice-key"), Scopes: ScopeThreads}},
		JWT:     JWTConfig{HS256Secret: hsSecret, Leeway: time.Minute, AnyAudience: true},
	}, nil)
	if err != nil {
		f.Fatal(err)
	}
	a.jwt.now = func() time.Time { return now }
	for _, s := range []string{
		"Bearer alice-key", "bearer alice-key", "Basic x", "Bearer ", "Bearer a.b.c", "Bearer ..", "Bearer \x00",
		"Bearer " + sign(f, jwt.SigningMethodHS256, []byte(hsSecret), base("threads", []string{"p-*"})),
		"Bearer " + sign(f, jwt.SigningMethodHS256, []byte(hsSecret), base("scope", "admin", "sub", "a@b")),
		"Bearer " + sign(f, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, base()),
		"Bearer eyJhbGciOiJIUzI1NiJ9.e30.", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
	} {
		f.Add(s, "", false)
		f.Add("", s[min(len(s), 7):], true)
	}
	f.Fuzz(func(t *testing.T, authz, apiKey string, apiHeader bool) {
		h := http.Header{}
		if authz != "" {
			h["Authorization"] = []string{authz}
		}
		if apiKey != "" {
			h["X-Api-Key"] = []string{apiKey}
		}
		p, err := a.Authenticate(&http.Request{Header: h}, apiHeader)
		if err != nil {
			if p != nil || !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v with principal %v", err, p)
			}
			return
		}
		if identity.ValidUser(p.User) != nil || p.Has(ScopeAdmin) && !p.Has(ScopeThreads) {
			t.Fatalf("accepted principal %+v", p)
		}
	})
}
