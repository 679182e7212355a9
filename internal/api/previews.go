package api

import "time"

// CreatePreview is the body of POST /threads/{thread}/previews.
type CreatePreview struct {
	// Port inside the sandbox (1-65535).
	Port int `json:"port"`
	// TTL is how long the link works, a Go duration ("30m", "2h"); "" =
	// 1h; at most the gateway's preview_max_ttl (24h by default).
	TTL string `json:"ttl,omitempty"`
}

// Preview is one preview link. URL (and PathURL) are the credential:
// whoever holds them reaches the port with nothing else.
type Preview struct {
	// ID names the link to DELETE /threads/{thread}/previews/{id}; it is
	// not a credential.
	ID string `json:"id"`
	// URL is the host form ({link}.{preview_suffix}) when the gateway has
	// a preview_suffix, else the path form.
	URL string `json:"url"`
	// PathURL is the path form: {sandbox_origin}/preview/{link}/.
	PathURL   string    `json:"path_url"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
}

// PreviewKey is POST /admin/v1/preview-keys: the fleet key that now
// signs new links, and until when the previous one still verifies.
type PreviewKey struct {
	KeyID                 int       `json:"key_id"`
	PreviousVerifiesUntil time.Time `json:"previous_verifies_until"`
}

// PreviewList is GET /threads/{thread}/previews: the live links of the
// thread's current sandbox.
type PreviewList struct {
	Previews []Preview `json:"previews"`
}
