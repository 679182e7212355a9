package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dialer connects to an endpoint under the egress address policy
// (egress.Dialer): the check happens at each dial.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// opTimeout bounds one admin operation's Redis round trips.
const opTimeout = 5 * time.Second

// Service keeps the endpoints and their stats; Loop delivers.
type Service struct {
	rdb    redis.UniversalClient
	cfg    Config
	log    *slog.Logger
	client *http.Client
}

// New makes the service; dial reaches endpoints.
func New(rdb redis.UniversalClient, cfg Config, dial Dialer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if k := cfg.Keys; k.Stream == "" || k.Endpoints == "" || k.Stats == "" || k.DeadPrefix == "" {
		return nil, errors.New("webhook: the redis keys are required")
	}
	cfg = cfg.withDefaults()
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	for i := range cfg.Endpoints {
		cfg.Endpoints[i].Source = SourceConfig
	}
	client := &http.Client{
		Transport: &http.Transport{DialContext: dial.DialContext, Proxy: nil, MaxIdleConnsPerHost: cfg.Concurrency,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: cfg.Timeout, ResponseHeaderTimeout: cfg.Timeout},
		Timeout: cfg.Timeout,
		// A redirect is not an acknowledgement, and following it would
		// reach an address nobody registered.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Service{rdb: rdb, cfg: cfg, log: cfg.Log.With("component", "webhooks"), client: client}, nil
}

// Close drops idle connections to endpoints.
func (s *Service) Close() { s.client.CloseIdleConnections() }

// Create registers an endpoint from the admin API; a missing secret is
// made. Its consumer group starts at the stream's end: it gets the events
// from now on. The returned endpoint holds the secret, the only time it is
// shown.
func (s *Service) Create(ctx context.Context, e Endpoint) (Endpoint, error) {
	e.ID, e.Source, e.Created = newID(), SourceAPI, time.Now().UTC().Truncate(time.Second)
	if e.Secret == "" {
		e.Secret = NewSecret()
	}
	if err := e.validate(); err != nil {
		return Endpoint{}, err
	}
	data, _ := json.Marshal(e)
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	// One slot, one transaction: no endpoint without its group.
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XGroupCreateMkStream(ctx, s.cfg.Keys.Stream, e.group(), "$")
		p.HSet(ctx, s.cfg.Keys.Endpoints, e.ID, data)
		return nil
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("create webhook endpoint: %w", err)
	}
	s.log.Info("webhook endpoint created", "endpoint", e.ID, "events", e.Events)
	return e, nil
}

// Delete removes an endpoint the admin API made, with its group, stats
// and dead letters.
func (s *Service) Delete(ctx context.Context, id string) error {
	if slices.ContainsFunc(s.cfg.Endpoints, func(e Endpoint) bool { return e.ID == id }) {
		return ErrConfigured
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	n, err := s.rdb.HDel(ctx, s.cfg.Keys.Endpoints, id).Result()
	if err != nil {
		return fmt.Errorf("delete webhook endpoint: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	// The endpoint is gone for every replica's next refresh; what is left
	// is unreachable, so failures here only leak until the next delete.
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XGroupDestroy(ctx, s.cfg.Keys.Stream, Endpoint{ID: id}.group())
		p.HDel(ctx, s.cfg.Keys.Stats, statField(id, statDelivered), statField(id, statFailed), statField(id, statDead))
		p.Del(ctx, s.cfg.Keys.DeadPrefix+id)
		return nil
	})
	if err != nil {
		s.log.Warn("webhook endpoint deleted, its group or stats left", "endpoint", id, "err", err)
	}
	s.log.Info("webhook endpoint deleted", "endpoint", id)
	return nil
}

// endpoints are the configured ones, then those the admin API made.
func (s *Service) endpoints(ctx context.Context) ([]Endpoint, error) {
	all, err := s.rdb.HGetAll(ctx, s.cfg.Keys.Endpoints).Result()
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	out := slices.Clone(s.cfg.Endpoints)
	for id, data := range all {
		var e Endpoint
		if err := json.Unmarshal([]byte(data), &e); err != nil || e.ID != id {
			s.log.Warn("webhook endpoint not understood", "endpoint", id, "err", err)
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out[len(s.cfg.Endpoints):], func(a, b Endpoint) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// List is every endpoint with its stats, without secrets.
func (s *Service) List(ctx context.Context) ([]View, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	eps, err := s.endpoints(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := s.rdb.HGetAll(ctx, s.cfg.Keys.Stats).Result()
	if err != nil {
		return nil, fmt.Errorf("webhook stats: %w", err)
	}
	n := func(id, what string) int64 {
		v, _ := strconv.ParseInt(counts[statField(id, what)], 10, 64)
		return v
	}
	out := make([]View, len(eps))
	for i, e := range eps {
		e.Secret = ""
		out[i] = View{Endpoint: e, Stats: Stats{Delivered: n(e.ID, statDelivered), Failed: n(e.ID, statFailed), DeadLettered: n(e.ID, statDead)}}
	}
	return out, nil
}

// DeadLetters are up to n of an endpoint's dead letters, newest first.
func (s *Service) DeadLetters(ctx context.Context, id string, n int64) ([]DeadLetter, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	eps, err := s.endpoints(ctx)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(eps, func(e Endpoint) bool { return e.ID == id }) {
		return nil, ErrNotFound
	}
	msgs, err := s.rdb.XRevRangeN(ctx, s.cfg.Keys.DeadPrefix+id, "+", "-", n).Result()
	if err != nil {
		return nil, fmt.Errorf("webhook dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(msgs))
	for _, m := range msgs {
		str := func(k string) string { v, _ := m.Values[k].(string); return v }
		d := DeadLetter{EventID: str("id"), Event: json.RawMessage(str("event")), Reason: str("reason")}
		d.Attempts, _ = strconv.Atoi(str("attempts"))
		d.At = entryTime(m.ID).UTC()
		if !json.Valid(d.Event) {
			d.Event = nil
		}
		out = append(out, d)
	}
	return out, nil
}

const (
	statDelivered = "delivered"
	statFailed    = "failed"
	statDead      = "dead"
)

func statField(id, what string) string { return id + "|" + what }
