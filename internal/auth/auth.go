// Package auth authenticates the gateway's clients. Two kinds of credential
// are accepted, both as "Authorization: Bearer <credential>" (and, on the
// provisioner API, as DeerFlow's "X-API-Key: <credential>"):
//
//   - static API keys, configured as SHA-256 hashes, each with a name (the
//     user) and scopes;
//   - JWTs signed with an HS256 secret, an RS256/ES256 public key, or a key
//     from a JWKS URL; `sub` is the user and an optional `threads` claim
//     limits which threads the token may open.
//
// A request's principal is a user name, its scopes and its thread patterns.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
)

// Scope is a set of permissions.
type Scope uint8

// Scopes. Admin includes threads.
const (
	// ScopeThreads: the principal's own threads and sandboxes (data plane,
	// /threads control plane, its own sandboxes in the provisioner API).
	ScopeThreads Scope = 1 << iota
	// ScopeAdmin: every user's sandboxes (listing, reaching and destroying
	// them; creating sandboxes for other users through the provisioner API).
	ScopeAdmin
)

// ParseScope reads one scope name.
func ParseScope(s string) (Scope, error) {
	switch s {
	case "threads":
		return ScopeThreads, nil
	case "admin":
		return ScopeAdmin | ScopeThreads, nil
	}
	return 0, fmt.Errorf("unknown scope %q (want threads or admin)", s)
}

// String lists the scope names, "+"-joined.
func (s Scope) String() string {
	switch {
	case s&ScopeAdmin != 0:
		return "threads+admin"
	case s&ScopeThreads != 0:
		return "threads"
	}
	return ""
}

// Principal is who a request acts for.
type Principal struct {
	// User names the principal's threads and data directory.
	User   string
	scopes Scope
	// threads are path.Match patterns the principal may open; nil = any.
	threads []string
	// caller is User as a header value, made once: the proxy names the
	// principal to sandboxes with it on every request (Caller).
	caller []string
}

// As is p acting for user: the same scopes and thread patterns, another
// user's threads. The router lets only an admin ask for it.
func (p *Principal) As(user string) *Principal {
	q := *p
	q.User = user
	q.caller = []string{user}
	return &q
}

// NewPrincipal returns a principal; threads nil means every thread.
func NewPrincipal(user string, scopes Scope, threads []string) *Principal {
	if scopes&ScopeAdmin != 0 {
		scopes |= ScopeThreads
	}
	return &Principal{User: user, scopes: scopes, threads: threads, caller: []string{user}}
}

// Caller is the principal's user as a header value (the data plane's
// sandboxspec.CallerHeader), shared by every request: never modify it.
func (p *Principal) Caller() []string { return p.caller }

// Has reports whether the principal holds every scope in s (s == 0: any
// authenticated principal).
func (p *Principal) Has(s Scope) bool { return p.scopes&s == s }

// MayOpen reports whether the principal's thread patterns allow thread.
// Patterns are checked when the credential is accepted, so a match error
// cannot happen here.
func (p *Principal) MayOpen(thread string) bool {
	if p.threads == nil {
		return true
	}
	for _, pat := range p.threads {
		if ok, _ := path.Match(pat, thread); ok {
			return true
		}
	}
	return false
}

// Owns reports whether p may reach the sandbox of (user, thread): its own
// (an admin: anyone's), within its thread patterns.
func (p *Principal) Owns(user, thread string) bool {
	return (user == p.User || p.Has(ScopeAdmin)) && p.MayOpen(thread)
}

// local is the principal of a gateway without authentication: the one
// trusted local user, DeerFlow's "default".
var local = NewPrincipal("default", ScopeThreads|ScopeAdmin, nil)

// Local is the principal of every request when authentication is off.
func Local() *Principal { return local }

// ErrUnauthenticated is a missing, malformed, unknown, expired or otherwise
// invalid credential (401). The wrapped detail is for the log only.
var ErrUnauthenticated = errors.New("missing or invalid credentials")

// maxCredentialLen bounds what is hashed or parsed: a JWT with a few
// claims is well under 2 KiB; 8 KiB leaves room for fat ones.
const maxCredentialLen = 8 << 10

// Config selects the credentials the gateway accepts.
type Config struct {
	APIKeys []APIKey
	JWT     JWTConfig
}

// Enabled reports whether any credential is configured; without one the
// gateway has no authentication.
func (c Config) Enabled() bool { return len(c.APIKeys) > 0 || c.JWT.enabled() }

// Validate names the first bad setting. It reads no file and fetches
// nothing: New does.
func (c Config) Validate() error {
	seen := map[string]bool{}
	for _, k := range c.APIKeys {
		if err := k.validate(); err != nil {
			return fmt.Errorf("auth_api_keys: %w", err)
		}
		if seen[k.SHA256] {
			return fmt.Errorf("auth_api_keys: key %q: the same key hash is listed twice", k.Name)
		}
		seen[k.SHA256] = true
	}
	return c.JWT.validate()
}

// Authenticator turns a request's credential into its principal.
type Authenticator struct {
	keys []apiKey
	jwt  *jwtVerifier // nil without JWT settings
}

// New builds an authenticator: it reads the public key file and makes a
// first JWKS fetch (a failed fetch is retried when a token needs a key).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	a := &Authenticator{keys: newKeySet(cfg.APIKeys)}
	if cfg.JWT.enabled() {
		v, err := newJWTVerifier(ctx, cfg.JWT, log)
		if err != nil {
			return nil, err
		}
		a.jwt = v
	}
	return a, nil
}

// Authenticate returns the principal of r's credential: the Authorization
// bearer credential or, when apiKeyHeader (the provisioner API), X-API-Key.
// Errors wrap ErrUnauthenticated. A cached credential costs no allocation.
func (a *Authenticator) Authenticate(r *http.Request, apiKeyHeader bool) (*Principal, error) {
	cred, err := credential(r.Header, apiKeyHeader)
	if err != nil {
		return nil, err
	}
	return a.check(cred)
}

func (a *Authenticator) check(cred string) (*Principal, error) {
	if len(cred) > maxCredentialLen {
		return nil, fmt.Errorf("%w: credential longer than %d bytes", ErrUnauthenticated, maxCredentialLen)
	}
	if p := a.matchKey(cred); p != nil {
		return p, nil
	}
	if a.jwt != nil && strings.Count(cred, ".") == 2 {
		return a.jwt.verify(cred)
	}
	return nil, fmt.Errorf("%w: unknown API key", ErrUnauthenticated)
}

// credential extracts the credential; an Authorization header that is not
// a bearer credential is refused rather than skipped.
func credential(h http.Header, apiKeyHeader bool) (string, error) {
	if v := h.Get("Authorization"); v != "" {
		const bearer = "bearer "
		if len(v) <= len(bearer) || !strings.EqualFold(v[:len(bearer)], bearer) {
			return "", fmt.Errorf("%w: Authorization is not a bearer credential", ErrUnauthenticated)
		}
		if cred := strings.TrimSpace(v[len(bearer):]); cred != "" {
			return cred, nil
		}
		return "", fmt.Errorf("%w: empty bearer credential", ErrUnauthenticated)
	}
	if apiKeyHeader {
		if v := strings.TrimSpace(h.Get("X-Api-Key")); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: no credential", ErrUnauthenticated)
}
