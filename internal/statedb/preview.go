package statedb

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/state"
)

// Preview links (internal/preview) are verified by every replica from its
// own copy of the fleet keys and of the revoked ids; Redis keeps the
// originals (Keys.PreviewKeys, PreviewRevoked), announces changes on
// PreviewChannel, and keeps each sandbox's list of links for its owner.

// PreviewKeySet is the fleet's signing keys as loaded: current signs new
// links; every key in Secrets verifies.
type PreviewKeySet struct {
	Current uint16
	Secrets map[uint16][]byte
}

func newPreviewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("preview key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b[:]), nil
}

// scriptEnsurePreviewKey creates the fleet's first key when it has none:
// the first replica to ask wins, the rest read its key. KEYS: keys hash.
// ARGV: candidate secret (base64). Returns the hash (HGETALL).
var scriptEnsurePreviewKey = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], 'current', '1') == 1 then
  redis.call('HSET', KEYS[1], '1', '0|' .. ARGV[1])
end
return redis.call('HGETALL', KEYS[1])
`)

// scriptRotatePreviewKey adds a key and makes it current; the previous
// current key keeps verifying until ARGV[3] (now + the longest link ttl:
// every link it signed has expired by then), and keys past their
// retirement are removed. KEYS: keys hash. ARGV: candidate secret
// (base64), now (unix s), retire_after (unix s). Returns the new key id.
var scriptRotatePreviewKey = redis.NewScript(`
local now = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= 'current' then
    local retire = tonumber(string.match(all[i+1], '^(%d+)|'))
    if retire and retire > 0 and retire < now then redis.call('HDEL', KEYS[1], all[i]) end
  end
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'current') or '0')
if cur > 0 then
  local old = redis.call('HGET', KEYS[1], tostring(cur))
  if old then
    -- keep the secret (from the '|' on), set its retirement
    local bar = string.find(old, '|', 1, true)
    redis.call('HSET', KEYS[1], tostring(cur), ARGV[3] .. string.sub(old, bar))
  end
end
local nxt = cur % 65535 + 1
redis.call('HSET', KEYS[1], tostring(nxt), '0|' .. ARGV[1], 'current', tostring(nxt))
return nxt
`)

// PreviewKeys loads the fleet's keys, creating the first one if there is
// none; keys past their retirement are left out.
func (s *Store) PreviewKeys(ctx context.Context, now time.Time) (PreviewKeySet, error) {
	candidate, err := newPreviewSecret()
	if err != nil {
		return PreviewKeySet{}, err
	}
	flat, err := scriptEnsurePreviewKey.Run(ctx, s.rdb, []string{s.keys.PreviewKeys()}, candidate).StringSlice()
	if err != nil {
		return PreviewKeySet{}, fmt.Errorf("load preview keys: %w", err)
	}
	set := PreviewKeySet{Secrets: make(map[uint16][]byte)}
	for i := 0; i+1 < len(flat); i += 2 {
		if flat[i] == "current" {
			cur, err := strconv.ParseUint(flat[i+1], 10, 16)
			if err != nil {
				return PreviewKeySet{}, fmt.Errorf("preview keys: bad current %q", flat[i+1])
			}
			set.Current = uint16(cur)
			continue
		}
		id, err1 := strconv.ParseUint(flat[i], 10, 16)
		retire, b64, ok := strings.Cut(flat[i+1], "|")
		until, err2 := strconv.ParseInt(retire, 10, 64)
		secret, err3 := base64.StdEncoding.DecodeString(b64)
		if err := errors.Join(err1, err2, err3); err != nil || !ok {
			return PreviewKeySet{}, fmt.Errorf("preview keys: bad key %q", flat[i])
		}
		if until == 0 || until >= now.Unix() {
			set.Secrets[uint16(id)] = secret
		}
	}
	return set, nil
}

// RotatePreviewKey makes a new key current and announces it; the old one
// verifies for maxTTL more (the longest a link it signed can live).
func (s *Store) RotatePreviewKey(ctx context.Context, now time.Time, maxTTL time.Duration) (uint16, error) {
	candidate, err := newPreviewSecret()
	if err != nil {
		return 0, err
	}
	id, err := scriptRotatePreviewKey.Run(ctx, s.rdb, []string{s.keys.PreviewKeys()}, candidate,
		now.Unix(), now.Add(maxTTL).Unix()+1).Int()
	if err != nil {
		return 0, fmt.Errorf("rotate preview key: %w", err)
	}
	if err := s.rdb.Publish(ctx, s.keys.PreviewChannel(), "k").Err(); err != nil {
		return 0, fmt.Errorf("announce preview key: %w", err)
	}
	return uint16(id), nil
}

// scriptAddPreview lists a link under its sandbox only while the record
// holds the incarnation it was signed for (a link of a replaced sandbox
// opens nothing and must not be listed); the list expires with its last
// link. KEYS: sbx, previews. ARGV: id, value, incarnation, seconds to the
// link's expiry. Returns 1, or 0 when the incarnation is gone.
var scriptAddPreview = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'incarnation')
if not st[1] or st[1] == 'destroying' or st[2] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('TTL', KEYS[2]) < tonumber(ARGV[4]) then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
return 1
`)

// AddPreview lists p under sid; ok is false when sid's record no longer
// holds p's incarnation.
func (s *Store) AddPreview(ctx context.Context, sid string, p state.Preview, now time.Time) (bool, error) {
	value := fmt.Sprintf("%d|%d|%d|%s", p.Port, p.Expires.Unix(), p.KeyID, p.Incarnation)
	ttl := int64(p.Expires.Sub(now)/time.Second) + 1
	n, err := scriptAddPreview.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid), s.keys.Previews(sid)},
		p.ID, value, p.Incarnation, ttl).Int()
	if err != nil {
		return false, fmt.Errorf("add preview: %w", err)
	}
	return n == 1, nil
}

// Previews lists sid's links, expired ones included (the caller filters
// by time and incarnation).
func (s *Store) Previews(ctx context.Context, sid string) ([]state.Preview, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Previews(sid)).Result()
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	out := make([]state.Preview, 0, len(h))
	for id, v := range h {
		if p, ok := parsePreview(id, v); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func parsePreview(id, v string) (state.Preview, bool) {
	f := strings.SplitN(v, "|", 4)
	if len(f) != 4 {
		return state.Preview{}, false
	}
	port, err1 := strconv.Atoi(f[0])
	exp, err2 := strconv.ParseInt(f[1], 10, 64)
	key, err3 := strconv.ParseUint(f[2], 10, 16)
	if errors.Join(err1, err2, err3) != nil {
		return state.Preview{}, false
	}
	return state.Preview{ID: id, Port: port, Expires: time.Unix(exp, 0), KeyID: uint16(key), Incarnation: f[3]}, true
}

// RevokePreview revokes sid's link id: (1) the id joins the revoked set
// (until the link would have expired) and every replica is told, (2) it
// leaves sid's list. ok is false when sid lists no such link. A crash
// between the steps leaves a revoked link listed, which a second revoke
// removes. expires is the link's.
func (s *Store) RevokePreview(ctx context.Context, sid, id string, now time.Time) (time.Time, bool, error) {
	v, err := s.rdb.HGet(ctx, s.keys.Previews(sid), id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read preview: %w", err)
	}
	p, ok := parsePreview(id, v)
	if !ok {
		return time.Time{}, false, fmt.Errorf("preview %s: unreadable entry", id)
	}
	exp := p.Expires.Unix()
	_, err = s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZAdd(ctx, s.keys.PreviewRevoked(), redis.Z{Score: float64(exp), Member: id})
		pipe.ZRemRangeByScore(ctx, s.keys.PreviewRevoked(), "-inf", "("+strconv.FormatInt(now.Unix(), 10))
		return nil
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("revoke preview: %w", err)
	}
	if err := s.rdb.Publish(ctx, s.keys.PreviewChannel(), "r "+id+" "+strconv.FormatInt(exp, 10)).Err(); err != nil {
		return time.Time{}, false, fmt.Errorf("announce revocation: %w", err)
	}
	if err := s.rdb.HDel(ctx, s.keys.Previews(sid), id).Err(); err != nil {
		return time.Time{}, false, fmt.Errorf("unlist preview: %w", err)
	}
	return p.Expires, true, nil
}

// PreviewRevoked loads the revoked ids of links not yet expired, with
// their expiry (unix s).
func (s *Store) PreviewRevoked(ctx context.Context, now time.Time) (map[string]int64, error) {
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, s.keys.PreviewRevoked(),
		&redis.ZRangeBy{Min: strconv.FormatInt(now.Unix(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("load revoked previews: %w", err)
	}
	out := make(map[string]int64, len(zs))
	for _, z := range zs {
		if id, ok := z.Member.(string); ok {
			out[id] = int64(z.Score)
		}
	}
	return out, nil
}

// PreviewSubscription is a live subscription to PreviewChannel.
type PreviewSubscription struct{ sub *redis.PubSub }

// SubscribePreviews subscribes and waits for Redis's confirmation, so
// that whatever is published from then on is delivered; the caller loads
// the keys and the revoked set after it, so nothing falls in between.
func (s *Store) SubscribePreviews(ctx context.Context) (*PreviewSubscription, error) {
	sub := s.rdb.Subscribe(ctx, s.keys.PreviewChannel())
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("subscribe previews: %w", err)
	}
	return &PreviewSubscription{sub: sub}, nil
}

// Next waits for the next message's payload. After an error the
// subscription may have missed messages: close it and start over.
func (p *PreviewSubscription) Next(ctx context.Context) (string, error) {
	m, err := p.sub.ReceiveMessage(ctx)
	if err != nil {
		return "", fmt.Errorf("preview subscription: %w", err)
	}
	return m.Payload, nil
}

// Close ends the subscription.
func (p *PreviewSubscription) Close() error { return p.sub.Close() }
