package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// adminRule is auth_jwt_admin_claim/value: which verified tokens are
// admins. An OAuth scope such as "admin" is no admin marker on its own: an
// issuer may grant it to any of its clients for some other service.
type adminRule struct {
	claim, value string // claim "" = no token is an admin
}

// holds reports whether the verified token's claims make it an admin. It
// reads the payload again (only on a cache miss, and only when the rule is
// configured) so that the claim may be any name or nested path.
func (r adminRule) holds(token string) (bool, error) {
	if r.claim == "" {
		return false, nil
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false, errors.New("not a JWS compact token")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return false, fmt.Errorf("payload: %w", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		return false, fmt.Errorf("payload: %w", err)
	}
	return r.matches(lookupClaim(claims, r.claim)), nil
}

// lookupClaim finds name as a top-level claim (names such as
// https://example.com/roles hold dots), else as a dotted path.
func lookupClaim(claims map[string]any, name string) any {
	if v, ok := claims[name]; ok {
		return v
	}
	var cur any = claims
	for _, part := range strings.Split(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// matches: the value itself, an item of a list, a word of a
// space-separated string (OAuth's scope form), or a boolean written as
// true/false.
func (r adminRule) matches(v any) bool {
	switch v := v.(type) {
	case string:
		return v == r.value || slices.Contains(strings.Fields(v), r.value)
	case bool:
		return strconv.FormatBool(v) == r.value
	case []any:
		for _, item := range v {
			if s, ok := item.(string); ok && s == r.value {
				return true
			}
		}
	}
	return false
}
