package webhook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/events"
)

// Sources of an endpoint.
const (
	SourceConfig = "config"
	SourceAPI    = "api"
)

// Endpoint is one receiver of events.
type Endpoint struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Events are the event types it gets; empty = all.
	Events []events.Type `json:"events,omitempty"`
	// Secret signs its deliveries; never returned but by the create.
	Secret  string    `json:"secret,omitempty"`
	Source  string    `json:"source"`
	Created time.Time `json:"created_at,omitzero"`
}

// Errors of bad input and unknown endpoints (the router's table maps them).
var (
	ErrBadEndpoint = errors.New("webhook endpoint")
	ErrNotFound    = errors.New("no such webhook endpoint")
	ErrConfigured  = errors.New("this webhook endpoint is defined in the gateway's configuration; remove it there")
)

var (
	idPattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	typePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

const maxURL = 2048

// validate checks what an operator or an API caller wrote.
func (e Endpoint) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadEndpoint, fmt.Sprintf(format, a...))
	}
	if !idPattern.MatchString(e.ID) {
		return bad("id must be 1-63 characters of [a-z0-9_-], starting with a letter or digit")
	}
	u, err := url.Parse(e.URL)
	if err != nil || len(e.URL) > maxURL || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return bad("url must be an absolute http:// or https:// URL without user info or fragment, at most %d characters", maxURL)
	}
	for _, t := range e.Events {
		if !typePattern.MatchString(string(t)) {
			return bad("events must be event type names such as ready or destroyed")
		}
	}
	if _, err := secretKey(e.Secret); err != nil {
		return bad("%v", err)
	}
	return nil
}

// wants reports whether the endpoint gets events of type t.
func (e Endpoint) wants(t events.Type) bool {
	return len(e.Events) == 0 || slices.Contains(e.Events, t)
}

// group is the endpoint's consumer group on the events stream.
func (e Endpoint) group() string { return "webhook:" + e.ID }

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "ep_" + hex.EncodeToString(b)
}

// Stats count an endpoint's deliveries, fleet-wide.
type Stats struct {
	// Delivered: events the endpoint acknowledged with a 2xx.
	Delivered int64 `json:"delivered"`
	// Failed: attempts that failed (an answer other than 2xx, or none).
	Failed int64 `json:"failed"`
	// DeadLettered: events given up on after MaxAge.
	DeadLettered int64 `json:"dead_lettered"`
}

// View is an endpoint as the admin API lists it: no secret.
type View struct {
	Endpoint
	Stats Stats `json:"stats"`
}

// DeadLetter is an event an endpoint never acknowledged.
type DeadLetter struct {
	EventID  string          `json:"event_id"`
	Event    json.RawMessage `json:"event"`
	Reason   string          `json:"reason"`
	Attempts int             `json:"attempts"`
	At       time.Time       `json:"at"`
}
