package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sandgate/sandgate/internal/identity"
)

// JWTConfig selects how bearer JWTs are verified. Any mix of the three key
// sources may be set; each token's alg picks one, and an alg whose key is
// not configured is refused (never `none`, never a key of another type).
type JWTConfig struct {
	// HS256Secret verifies HS256 tokens; at least 32 bytes.
	HS256Secret string
	// PublicKeyFile is a PEM public key (or certificate): RSA (2048 bits or
	// more) verifies RS256, ECDSA P-256 verifies ES256.
	PublicKeyFile string
	// JWKSURL serves the issuer's keys (RS256/ES256), fetched at start,
	// refreshed hourly and when a token names an unknown kid.
	JWKSURL string
	// Issuer, when set, must match iss.
	Issuer string
	// Audience must be one of aud. It is required with JWT auth unless
	// AnyAudience says on purpose that a token minted for any service of
	// the issuer may open sandboxes.
	Audience    string
	AnyAudience bool
	// AdminClaim and AdminValue make a token an admin: the claim (a
	// top-level name, else a dotted path into nested objects, e.g.
	// realm_access.roles) is the value, or a list or space-separated string
	// holding it. Empty: no token is ever an admin (scope "admin", which
	// any issuer's client may be granted, means nothing here).
	AdminClaim string
	AdminValue string
	// Leeway is the clock skew allowed on exp and nbf.
	Leeway time.Duration
}

func (c JWTConfig) enabled() bool {
	return c.HS256Secret != "" || c.PublicKeyFile != "" || c.JWKSURL != ""
}

func (c JWTConfig) validate() error {
	if c.HS256Secret != "" && len(c.HS256Secret) < 32 {
		return errors.New("auth_jwt_hs256_secret: must be at least 32 bytes (e.g. openssl rand -hex 32)")
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("auth_jwt_jwks_url: %q is not an http(s) URL", c.JWKSURL)
		}
	}
	if !c.enabled() && (c.Issuer != "" || c.Audience != "" || c.AnyAudience || c.AdminClaim != "" || c.AdminValue != "") {
		return errors.New("auth_jwt_issuer/audience/any_audience/admin_claim/admin_value: set a JWT key (hs256 secret, public key file or JWKS URL) too")
	}
	if c.enabled() && c.Audience == "" && !c.AnyAudience {
		return errors.New("auth_jwt_audience: required with JWT auth (the aud your issuer puts in tokens meant for Sandgate), " +
			"or set auth_jwt_any_audience=true to accept tokens minted for any audience")
	}
	if c.Audience != "" && c.AnyAudience {
		return errors.New("auth_jwt_audience and auth_jwt_any_audience=true contradict each other; set one")
	}
	if (c.AdminClaim == "") != (c.AdminValue == "") {
		return errors.New("auth_jwt_admin_claim and auth_jwt_admin_value: set both (or neither: no JWT is an admin)")
	}
	if c.Leeway < 0 || c.Leeway > 5*time.Minute {
		return errors.New("auth_jwt_leeway: must be between 0 and 5m")
	}
	return nil
}

// Limits on the claims a token may carry.
const (
	maxThreadPatterns = 256
	maxPatternLen     = 256
)

// A verified token is trusted for this long (at most until it expires), so
// a client re-sending its token costs a map lookup, not a signature check.
const (
	tokenCacheTTL = time.Minute
	tokenCacheMax = 4096
)

type jwtVerifier struct {
	parser *jwt.Parser
	admin  adminRule
	hmac   []byte
	pub    any // *rsa.PublicKey or *ecdsa.PublicKey from PublicKeyFile
	pubAlg string
	jwks   *jwks
	cache  tokenCache
	now    func() time.Time
}

func newJWTVerifier(ctx context.Context, cfg JWTConfig, log *slog.Logger) (*jwtVerifier, error) {
	v := &jwtVerifier{now: time.Now, cache: tokenCache{m: map[string]cachedToken{}},
		admin: adminRule{claim: cfg.AdminClaim, value: cfg.AdminValue}}
	var methods []string
	if cfg.HS256Secret != "" {
		v.hmac = []byte(cfg.HS256Secret)
		methods = append(methods, "HS256")
	}
	if cfg.PublicKeyFile != "" {
		key, alg, err := readPublicKey(cfg.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("auth_jwt_public_key_file: %w", err)
		}
		v.pub, v.pubAlg = key, alg
		methods = append(methods, alg)
	}
	if cfg.JWKSURL != "" {
		v.jwks = newJWKS(cfg.JWKSURL, log)
		if err := v.jwks.refresh(ctx); err != nil {
			log.Warn("auth: first JWKS fetch failed; retried when a token needs a key", "err", err)
		}
		methods = append(methods, algRS256, algES256)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(slices.Compact(slices.Sorted(slices.Values(methods)))),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

const (
	algHS256 = "HS256"
	algRS256 = "RS256"
	algES256 = "ES256"
)

func (v *jwtVerifier) verify(token string) (*Principal, error) {
	now := v.now()
	if p := v.cache.get(token, now); p != nil {
		return p, nil
	}
	var cl claims
	if _, err := v.parser.ParseWithClaims(token, &cl, v.key); err != nil {
		return nil, fmt.Errorf("%w: jwt: %w", ErrUnauthenticated, err)
	}
	admin, err := v.admin.holds(token)
	if err != nil {
		return nil, fmt.Errorf("%w: jwt: %w", ErrUnauthenticated, err)
	}
	p, err := cl.principal(admin)
	if err != nil {
		return nil, fmt.Errorf("%w: jwt: %w", ErrUnauthenticated, err)
	}
	until := cl.ExpiresAt.Time // required by the parser
	if limit := now.Add(tokenCacheTTL); until.After(limit) {
		until = limit
	}
	v.cache.put(strings.Clone(token), p, now, until)
	return p, nil
}

// key picks the verification key for the token's alg (the parser has
// already refused algs outside the configured ones).
func (v *jwtVerifier) key(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	switch alg {
	case algHS256:
		if v.hmac != nil {
			return v.hmac, nil
		}
	case algRS256, algES256:
		if v.pub != nil && v.pubAlg == alg && (kid == "" || v.jwks == nil) {
			return v.pub, nil
		}
		if v.jwks != nil {
			return v.jwks.key(kid, alg)
		}
	}
	return nil, fmt.Errorf("no key for alg %s", alg)
}

// claims are the registered claims plus Sandgate's.
type claims struct {
	jwt.RegisteredClaims
	// Threads limits the threads the token may open (path.Match patterns);
	// absent = every thread of the subject.
	Threads *fields `json:"threads,omitempty"`
}

// fields is a claim given as a space-separated string or a list of strings.
type fields []string

func (f *fields) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*f = append(fields{}, strings.Fields(s)...)
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*f = append(fields{}, l...)
	return nil
}

func (cl *claims) principal(admin bool) (*Principal, error) {
	if err := identity.ValidUser(cl.Subject); err != nil {
		return nil, fmt.Errorf("sub %q: %w", cl.Subject, err)
	}
	var threads []string
	if cl.Threads != nil {
		if len(*cl.Threads) > maxThreadPatterns {
			return nil, fmt.Errorf("threads: more than %d patterns", maxThreadPatterns)
		}
		threads = append([]string{}, *cl.Threads...)
		for _, p := range threads {
			if _, err := path.Match(p, ""); err != nil || p == "" || len(p) > maxPatternLen {
				return nil, fmt.Errorf("threads: bad pattern %q", p)
			}
		}
	}
	scopes := ScopeThreads // every token has it
	if admin {
		scopes |= ScopeAdmin
	}
	return NewPrincipal(cl.Subject, scopes, threads), nil
}

// tokenCache holds verified tokens until they expire (at most
// tokenCacheTTL), bounded to tokenCacheMax entries.
type tokenCache struct {
	mu sync.RWMutex
	m  map[string]cachedToken
}

type cachedToken struct {
	p     *Principal
	until int64 // unix nanos
}

func (c *tokenCache) get(token string, now time.Time) *Principal {
	c.mu.RLock()
	e, ok := c.m[token]
	c.mu.RUnlock()
	if !ok || now.UnixNano() >= e.until {
		return nil
	}
	return e.p
}

func (c *tokenCache) put(token string, p *Principal, now, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= tokenCacheMax {
		n := now.UnixNano()
		for k, e := range c.m { // expired first, then arbitrary ones, down to half
			if e.until <= n {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < tokenCacheMax/2 {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[token] = cachedToken{p: p, until: until.UnixNano()}
}
