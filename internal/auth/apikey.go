package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sandgate/sandgate/internal/identity"
)

// APIKey is one static key as configured: only its SHA-256 is stored.
//
// SHA-256, not bcrypt or argon2: API keys are random secrets of 128 bits or
// more (`openssl rand -hex 32`), which no attacker can brute-force from a
// fast hash; slow hashes protect low-entropy passwords, and would cost tens
// of milliseconds per request or a cache holding the plaintext keys.
type APIKey struct {
	// Name is the principal's user name.
	Name string
	// SHA256 is the lowercase hex SHA-256 of the key:
	// `printf %s "$KEY" | sha256sum`.
	SHA256 string
	// Scopes of the key; 0 = none (e.g. a key that only scrapes /metrics).
	Scopes Scope
}

// ParseAPIKeys reads the compact form of auth_api_keys (flag and env):
// comma-separated `name=sha256hex[:scope+scope]`. Without `:` a key has the
// threads scope; with an empty scope list it has none.
func ParseAPIKeys(s string) ([]APIKey, error) {
	var out []APIKey
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, rest, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=sha256[:scopes]", redact(item))
		}
		hash, scopes, hasScopes := strings.Cut(rest, ":")
		k := APIKey{Name: strings.TrimSpace(name), SHA256: strings.ToLower(strings.TrimSpace(hash)), Scopes: ScopeThreads}
		if hasScopes {
			sc, err := parseScopes(strings.FieldsFunc(scopes, func(r rune) bool { return r == '+' || r == ' ' }))
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k.Name, err)
			}
			k.Scopes = sc
		}
		if err := k.validate(); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// FormatAPIKeys is the compact form ParseAPIKeys reads.
func FormatAPIKeys(keys []APIKey) string {
	items := make([]string, len(keys))
	for i, k := range keys {
		items[i] = k.Name + "=" + k.SHA256 + ":" + k.Scopes.String()
	}
	return strings.Join(items, ",")
}

func parseScopes(names []string) (Scope, error) {
	var s Scope
	for _, n := range names {
		sc, err := ParseScope(n)
		if err != nil {
			return 0, err
		}
		s |= sc
	}
	return s, nil
}

// redact keeps a malformed entry's name for the error, not what may be a
// pasted plaintext key.
func redact(item string) string {
	if len(item) > 8 {
		return item[:4] + "..."
	}
	return "..."
}

func (k APIKey) validate() error {
	if err := identity.ValidUser(k.Name); err != nil {
		return fmt.Errorf("key name %q: %w", k.Name, err)
	}
	if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("key %q: sha256 must be 64 hex digits (printf %%s \"$KEY\" | sha256sum)", k.Name)
	}
	return nil
}

// apiKey is a configured key ready for matching.
type apiKey struct {
	sum       [sha256.Size]byte
	principal *Principal
}

func newKeySet(keys []APIKey) []apiKey {
	out := make([]apiKey, 0, len(keys))
	for _, k := range keys {
		var ak apiKey
		_, _ = hex.Decode(ak.sum[:], []byte(k.SHA256)) // validated
		ak.principal = NewPrincipal(k.Name, k.Scopes, nil)
		out = append(out, ak)
	}
	return out
}

// maxKeyLen is the longest credential tried as an API key (hashed in a
// stack buffer, so a key check allocates nothing); longer ones can only be
// JWTs.
const maxKeyLen = 512

// matchKey returns the principal of the API key cred, or nil. Every
// configured hash is compared in constant time, whichever matches.
func (a *Authenticator) matchKey(cred string) *Principal {
	if len(a.keys) == 0 || len(cred) > maxKeyLen {
		return nil
	}
	var buf [maxKeyLen]byte
	n := copy(buf[:], cred)
	sum := sha256.Sum256(buf[:n])
	var found *Principal
	for i := range a.keys {
		if subtle.ConstantTimeCompare(sum[:], a.keys[i].sum[:]) == 1 {
			found = a.keys[i].principal
		}
	}
	return found
}
