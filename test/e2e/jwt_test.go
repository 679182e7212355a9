package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sandgate/sandgate/internal/identity"
)

// TestJWTAdminOnlyThroughTheConfiguredClaim: a token that carries OAuth
// scope "admin" (which an issuer may hand any of its clients) is an ordinary
// user; only the configured claim and value make an admin. A token minted for
// another audience, or for none, is refused.
func TestJWTAdminOnlyThroughTheConfiguredClaim(t *testing.T) {
	t.Parallel()
	g := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"),
		"--auth-jwt-hs256-secret", jwtSecret, "--auth-jwt-audience", jwtAudience,
		"--auth-jwt-admin-claim", "sandgate_role", "--auth-jwt-admin-value", "operator").start()
	// Made through the provisioner API, so that its listing has it.
	code, body, _ := req{"POST", "/api/sandboxes", "", map[string]any{"sandbox_id": identity.SandboxID("alice", "private"),
		"thread_id": "private"}, bearer("alice-key")}.do(t, g)
	if code != 200 {
		t.Fatalf("alice creates her sandbox through the provisioner API: %d %s", code, body)
	}
	code, body, _ = req{"POST", "/threads/private/v1/file/write", "",
		map[string]any{"file": "/mnt/user-data/workspace/secret.txt", "content": "alice-only"}, bearer("alice-key")}.do(t, g)
	if code != 200 {
		t.Fatalf("alice writes her file: %d %s", code, body)
	}
	victim := "/sandboxes/" + identity.SandboxID("alice", "private") + "/v1/file/read"
	read := map[string]any{"file": "/mnt/user-data/workspace/secret.txt"}
	exp := time.Now().Add(time.Hour).Unix()

	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		want   int // reading alice's file by sandbox id
	}{
		{"scope admin", jwt.MapClaims{"sub": "mallory", "exp": exp, "scope": "openid admin"}, 404},
		{"scope admin list", jwt.MapClaims{"sub": "mallory", "exp": exp, "scope": []string{"admin"}}, 404},
		{"admin claim with another value", jwt.MapClaims{"sub": "mallory", "exp": exp, "sandgate_role": "admin"}, 404},
		{"the configured admin claim", jwt.MapClaims{"sub": "ops", "exp": exp, "sandgate_role": "operator"}, 200},
		{"admin claim but another audience", jwt.MapClaims{"sub": "ops", "exp": exp, "sandgate_role": "operator", "aud": "billing"}, 401},
		{"admin claim and no audience", jwt.MapClaims{"sub": "ops", "exp": exp, "sandgate_role": "operator", "aud": nil}, 401},
		{"no audience", jwt.MapClaims{"sub": "mallory", "exp": exp, "aud": nil}, 401},
	} {
		tok := token(t, c.claims)
		code, body, _ := req{"POST", victim, "", read, bearer(tok)}.do(t, g)
		if code != c.want {
			t.Errorf("%s: reading alice's sandbox answered %d, want %d: %s", c.name, code, c.want, body)
		}
		if c.want != 200 && strings.Contains(string(body), "alice-only") {
			t.Errorf("%s: alice's file leaked: %s", c.name, body)
		}
		// The admin listing of the provisioner API follows the same rule.
		code, body, _ = req{"GET", "/api/sandboxes", "", nil, bearer(tok)}.do(t, g)
		switch {
		case c.want == 401 && code != 401:
			t.Errorf("%s: /api/sandboxes answered %d, want 401", c.name, code)
		case c.want == 404 && (code != 200 || strings.Contains(string(body), "alice")):
			t.Errorf("%s: /api/sandboxes lists another user's sandbox: %d %s", c.name, code, body)
		case c.want == 200 && (code != 200 || !strings.Contains(string(body), "alice")):
			t.Errorf("%s: the admin's /api/sandboxes lacks alice's sandbox: %d %s", c.name, code, body)
		}
	}
}

// TestJWTWithoutAudienceRefusesToStart: a JWT key without auth_jwt_audience
// (and without the explicit opt-out) is a configuration error that names
// both settings; the opt-out starts.
func TestJWTWithoutAudienceRefusesToStart(t *testing.T) {
	t.Parallel()
	out := startFails(t, nil, "--auth-jwt-hs256-secret", jwtSecret)
	if !strings.Contains(out, "auth_jwt_audience") || !strings.Contains(out, "auth_jwt_any_audience") {
		t.Fatalf("the refusal does not name auth_jwt_audience and its opt-out:\n%s", out)
	}
	if strings.Contains(out, jwtSecret) {
		t.Fatalf("the refusal prints the JWT secret:\n%s", out)
	}
	g := newFleet(t, "--auth-jwt-hs256-secret", jwtSecret, "--auth-jwt-any-audience").start()
	tok := token(t, jwt.MapClaims{"sub": "dave", "exp": time.Now().Add(time.Hour).Unix(), "aud": "anything"})
	if code, body, _ := (req{"GET", "/threads/t/sandbox", "", nil, bearer(tok)}).do(t, g); code != 404 {
		t.Fatalf("with auth_jwt_any_audience a token for any audience is accepted: got %d %s, want 404 (no sandbox yet)", code, body)
	}
}
