package statedb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// The limits that must stay exact (the fleet's cap, each user's quotas)
// are each one small set of keys in a slot of their own, changed by one
// script together with the reservations that hold capacity for creates in
// progress. A reservation carries a deadline, so one whose replica died
// frees itself: every check drops those past it first.
//
// The fleet ({fleet}) counts what its buckets hold from a copy each bucket
// reports ("count|seq", the newest seq wins, so reports may arrive in any
// order or twice), plus the pre-started sandboxes and the reservations it
// keeps itself. A reservation is released in the same step that reports the
// bucket holding its new sandbox, so a create is never counted zero or two
// times once that step has run; a replica dying before it leaves the bucket's
// copy behind by one until the next report (any change in that bucket, or
// the reconciler's sync of it: Store.SyncCounts).
//
// A user ({u:user}) keeps its sandboxes as members: held (score heldScore)
// or reserved (score = deadline). Membership is idempotent, so a repeated
// step changes nothing, and the reconciler re-adds any record's sandbox its
// user lost (Store.Repair).

// heldScore marks a user's recorded sandbox (any deadline is below it).
const (
	heldScore = "1e15"
	heldAt    = 1e15
)

// scriptFleetReserve takes one unit of fleet-wide capacity for a create.
// Capacity counts the buckets' active + warm, the pre-started sandboxes and
// the reservations. Outcomes:
//
//	{'ok'}              reserved (also when max <= 0: no cap)
//	{'prewarm', sid}    kind 'claim' only: nothing reserved; take the
//	                    pre-started sandbox sid instead (Store.TakePrewarm)
//	{'evict', sid}      full: destroy pre-started sandbox sid, then reserve again
//	{'share', n}        hard mode, full, other users hold sandboxes and the
//	                    user holds its fair share n (max / users) or more
//	{'over'}            full, force set (soft mode, nothing warm): reserved beyond the cap
//	{'full'}            full: the caller looks for a warm sandbox to evict
//
// A claim is offered the oldest pre-started sandbox whatever the fleet's
// fullness (taking it moves its unit to the thread), unless the sandbox has
// an egress policy of its own (a pre-started one runs the fleet's). A claim
// naming a fingerprint (ARGV fp) is offered the oldest whose indexed
// fingerprint (KEYS[7]) equals it: the scan reads the pre-started index
// oldest first, one HGET each, O(pool size) at worst (pools are tens); an
// entry indexed without one (an earlier version's) never matches. A claim
// naming none (empty: an earlier version's replica) gets the oldest of any.
// A claim with a spread (ARGV spread, not 0: a retry after another took
// the sandbox it was offered) is offered the matching one at spread modulo
// their number instead: claims arriving together, all offered the oldest,
// spread over the pool on their retry rather than race for the next
// oldest (a burst of 100 on a pool of 20 claimed 8 of them that way).
// Eviction when full offers the oldest of any fingerprint. The refill (kind
// 'prewarm') only reserves free room. The fair share needs the number of
// users holding sandboxes (holders, reported by Commit) and the user's own
// count (ARGV mine, from its quota step).
// KEYS: fleetKeys. ARGV: sid, max, now, deadline, mode(soft|hard), user,
// mine, kind(”|claim|prewarm), force(0|1), fp, spread.
var scriptFleetReserve = redis.NewScript(`
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[3])) do
  redis.call('ZREM', KEYS[2], s)
  redis.call('HDEL', KEYS[3], s)
end
local sid, max, hard, user, mine, kind = ARGV[1], tonumber(ARGV[2]), ARGV[5] == 'hard', ARGV[6], tonumber(ARGV[7]), ARGV[8]
local function take()
  redis.call('ZADD', KEYS[2], ARGV[4], sid)
  if user ~= '' then redis.call('HSET', KEYS[3], sid, user) end
end
if redis.call('ZSCORE', KEYS[2], sid) then
  take()
  return {'ok'}
end
if kind == 'claim' and redis.call('SISMEMBER', KEYS[6], sid) == 1 then kind = '' end
local n = redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[4])
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
  n = n + tonumber(string.sub(v, 1, string.find(v, '|', 1, true) - 1))
end
local full = max > 0 and n >= max
if kind == 'prewarm' then
  if full then return {'full'} end
  take()
  return {'ok'}
end
local pre = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if kind == 'claim' then
  local fp, spread, offers = ARGV[10] or '', tonumber(ARGV[11] or '0') or 0, {}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    if fp == '' or redis.call('HGET', KEYS[7], m) == fp then
      offers[#offers + 1] = m
      if spread == 0 then break end
    end
  end
  if #offers > 0 then return {'prewarm', offers[spread % #offers + 1]} end
end
if full and hard and user ~= '' then
  local users = redis.call('HLEN', KEYS[5])
  if redis.call('HEXISTS', KEYS[5], user) == 0 then users = users + 1 end
  local share = math.max(1, math.floor(max / users))
  if users > 1 and mine >= share then return {'share', tostring(share)} end
end
if full and pre then return {'evict', pre} end
if not full then
  take()
  return {'ok'}
end
if ARGV[9] == '1' then
  take()
  return {'over'}
end
return {'full'}
`)

// scriptFleetCommit ends what a create, a destroy or a sync changed in the
// fleet's count: sid's reservation is released and sid leaves the
// pre-started index and its fingerprint (ARGV[7] = score: enters the index
// instead, with fingerprint ARGV[8], or none when that is empty), the
// bucket's reported count is kept if its seq is newer, and the user's
// holder count is set. Empty arguments skip their part.
// KEYS: fleetKeys. ARGV: sid, bucket, count, seq, user, held, prewarm
// score, prewarm fingerprint.
var scriptFleetCommit = redis.NewScript(`
if ARGV[1] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  if ARGV[7] ~= '' then
    redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
  else
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  if ARGV[7] ~= '' and ARGV[8] ~= '' then
    redis.call('HSET', KEYS[7], ARGV[1], ARGV[8])
  else
    redis.call('HDEL', KEYS[7], ARGV[1])
  end
end
if ARGV[2] ~= '' then
  local cur = redis.call('HGET', KEYS[1], ARGV[2])
  local seq = -1
  if cur then seq = tonumber(string.sub(cur, string.find(cur, '|', 1, true) + 1)) end
  if tonumber(ARGV[4]) > seq then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3] .. '|' .. ARGV[4]) end
end
if ARGV[5] ~= '' and ARGV[6] ~= '' then
  if tonumber(ARGV[6]) > 0 then
    redis.call('HSET', KEYS[5], ARGV[5], ARGV[6])
  else
    redis.call('HDEL', KEYS[5], ARGV[5])
  end
end
return 1
`)

// scriptUserReserve takes a unit of one user's quotas: its sandboxes held
// or reserved must stay under user_max and its reservations under
// user_creates; reservations past their deadline are dropped first, and a
// sandbox already a member is not counted twice.
// KEYS: the user's set. ARGV: sid, now, deadline, user_max, user_creates.
// Returns {outcome, n}: 'ok' with the user's count before this one,
// 'user_max' with its count, 'user_creates' with its creates in progress.
var scriptUserReserve = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
local all = redis.call('ZCARD', KEYS[1])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score then
  if tonumber(score) < ` + heldScore + ` then redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
  return {'ok', tostring(all - 1)}
end
local creating = all - redis.call('ZCOUNT', KEYS[1], '` + heldScore + `', '+inf')
local umax, ucreates = tonumber(ARGV[4]), tonumber(ARGV[5])
if umax > 0 and all >= umax then return {'user_max', tostring(all)} end
if ucreates > 0 and creating >= ucreates then return {'user_creates', tostring(creating)} end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return {'ok', tostring(all)}
`)

// scriptUserMember makes sid held by the user ('hold'), drops it ('leave'),
// or drops its reservation only ('unreserve': a held sandbox stays).
// KEYS: the user's set. ARGV: sid, op. Returns the user's held count.
var scriptUserMember = redis.NewScript(`
if ARGV[2] == 'hold' then
  redis.call('ZADD', KEYS[1], '` + heldScore + `', ARGV[1])
elseif ARGV[2] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if score and tonumber(score) < ` + heldScore + ` then redis.call('ZREM', KEYS[1], ARGV[1]) end
end
return redis.call('ZCOUNT', KEYS[1], '` + heldScore + `', '+inf')
`)

// Reserve takes a capacity unit for req.SandboxID: the user's quotas first
// (a user's reservation is recorded whether or not this request checks a
// quota: another replica's may), then the fleet's cap. A user at a limit or its fair share evicts its own oldest warm
// sandbox first; a full fleet evicts the oldest pre-started sandbox, then
// (hard mode) the oldest warm one of a user at or over its share, then the
// oldest warm one; soft mode with nothing to evict goes over the cap. A
// refusal by the fleet gives the user's unit back.
func (s *Store) Reserve(ctx context.Context, req state.ReserveRequest) (state.ReserveResult, error) {
	userStep := req.User != "" // its creates in progress count for its quotas, set or not
	var first []string
	mine := 0
	switch {
	case userStep && req.MaxPerUser <= 0 && req.MaxCreatesPerUser <= 0 && !(req.Hard && req.Max > 0):
		// The user's step can refuse nothing and the fleet needs no count
		// of it (no fair share): both in one round trip.
		user, fleet := s.userReserveCall(req), s.fleetReserveCall(req, 0, 0)
		if err := s.batch(ctx, []*call{user, fleet}, nil); err != nil {
			return state.ReserveResult{}, fmt.Errorf("reserve capacity: %w", err)
		}
		var err error
		if first, err = fleet.cmd.StringSlice(); err != nil {
			return state.ReserveResult{}, fmt.Errorf("reserve capacity: %w", err)
		}
	case userStep:
		res, err := s.reserveUser(ctx, req)
		if err != nil || res.Outcome != "ok" {
			return res, err
		}
		mine = res.Held
	}
	res, err := s.reserveFleet(ctx, req, mine, first)
	if err == nil && userStep && res.Outcome != "ok" && res.Outcome != "over" && res.Outcome != "prewarm" {
		err = s.userMember(ctx, req.User, req.SandboxID, "unreserve")
	}
	return res, err
}

func (s *Store) userReserveCall(req state.ReserveRequest) *call {
	return &call{script: scriptUserReserve, keys: []string{s.keys.User(req.User)},
		args: []any{req.SandboxID, ms(req.Now), ms(req.Deadline), req.MaxPerUser, req.MaxCreatesPerUser}}
}

func (s *Store) fleetReserveCall(req state.ReserveRequest, mine, force int) *call {
	mode := "soft"
	if req.Hard {
		mode = "hard"
	}
	return &call{script: scriptFleetReserve, keys: s.keys.fleetKeys(),
		args: []any{req.SandboxID, req.Max, ms(req.Now), ms(req.Deadline), mode, req.User, mine, req.Kind, force, req.Prewarm, req.Spread}}
}

func (s *Store) reserveUser(ctx context.Context, req state.ReserveRequest) (state.ReserveResult, error) {
	for pruned := false; ; pruned = true {
		c := s.userReserveCall(req)
		out, err := c.script.Run(ctx, s.rdb, c.keys, c.args...).StringSlice()
		if err != nil {
			return state.ReserveResult{}, fmt.Errorf("reserve user quota: %w", err)
		}
		n, err := strconv.Atoi(out[1])
		if err != nil {
			return state.ReserveResult{}, fmt.Errorf("reserve user quota: bad count %q: %w", out[1], err)
		}
		res := state.ReserveResult{Outcome: out[0], Held: n}
		if res.Outcome != "user_max" {
			return res, nil
		}
		victim, err := s.oldestWarmOf(ctx, req.User)
		if err != nil || victim != "" {
			return state.ReserveResult{Outcome: "evict", Victim: victim, Quota: true}, err
		}
		// A held member whose record is gone (a destroy that died between its
		// steps) counts for nothing: drop such members once and ask again.
		if pruned {
			return res, nil
		}
		if n, err := s.pruneUser(ctx, req.User); err != nil || n == 0 {
			return res, err
		}
	}
}

// reserveFleet runs the fleet's step (first: its outcome already read).
func (s *Store) reserveFleet(ctx context.Context, req state.ReserveRequest, mine int, first []string) (state.ReserveResult, error) {
	for force := 0; ; force++ {
		out := first
		if force > 0 || out == nil {
			c := s.fleetReserveCall(req, mine, force)
			var err error
			if out, err = c.script.Run(ctx, s.rdb, c.keys, c.args...).StringSlice(); err != nil {
				return state.ReserveResult{}, fmt.Errorf("reserve capacity: %w", err)
			}
		}
		res := state.ReserveResult{Outcome: out[0]}
		switch res.Outcome {
		case "evict", "prewarm":
			res.Victim = out[1]
			return res, nil
		case "share":
			var err error
			if res.Held, err = strconv.Atoi(out[1]); err != nil {
				return state.ReserveResult{}, fmt.Errorf("reserve capacity: bad share %q: %w", out[1], err)
			}
			if victim, err := s.oldestWarmOf(ctx, req.User); err != nil || victim != "" {
				return state.ReserveResult{Outcome: "evict", Victim: victim, Quota: true}, err
			}
			return res, nil
		case "full":
			if req.Kind == state.KindPrewarm {
				return res, nil
			}
			victim, err := s.oldestWarm(ctx, req)
			if err != nil || victim != "" {
				return state.ReserveResult{Outcome: "evict", Victim: victim}, err
			}
			if req.Hard || force > 0 {
				return res, nil
			}
		default:
			return res, nil
		}
	}
}

// oldestWarm picks the warm sandbox a full fleet evicts: the oldest of the
// buckets' oldest, in hard mode preferring one whose user holds its fair
// share or more. O(buckets), only at a full cap.
func (s *Store) oldestWarm(ctx context.Context, req state.ReserveRequest) (string, error) {
	n := s.keys.Buckets()
	pipe := s.rdb.Pipeline()
	heads := make([]*redis.ZSliceCmd, n)
	for b := range n {
		heads[b] = pipe.ZRangeWithScores(ctx, s.keys.Warm(b), 0, 0)
	}
	holders := pipe.HGetAll(ctx, s.keys.fleetKeys()[4])
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("find a warm sandbox to evict: %w", err)
	}
	var cands []redis.Z
	for _, h := range heads {
		cands = append(cands, h.Val()...)
	}
	if len(cands) == 0 {
		return "", nil
	}
	oldest := func(zs []redis.Z) string {
		best := zs[0]
		for _, z := range zs[1:] {
			if z.Score < best.Score {
				best = z
			}
		}
		return best.Member.(string)
	}
	if !req.Hard || req.Max <= 0 {
		return oldest(cands), nil
	}
	users := len(holders.Val())
	if _, ok := holders.Val()[req.User]; !ok && req.User != "" {
		users++
	}
	share := max(1, req.Max/max(users, 1))
	recs, err := s.records(ctx, members(cands))
	if err != nil {
		return "", err
	}
	over := map[string]bool{}
	for _, r := range recs {
		if held, _ := strconv.Atoi(holders.Val()[r.User]); held >= share {
			over[r.SandboxID] = true
		}
	}
	var overs []redis.Z
	for _, z := range cands {
		if over[z.Member.(string)] {
			overs = append(overs, z)
		}
	}
	if len(overs) > 0 {
		return oldest(overs), nil
	}
	return oldest(cands), nil
}

// oldestWarmOf is user's own oldest warm sandbox, "" if none: O(user's).
func (s *Store) oldestWarmOf(ctx context.Context, user string) (string, error) {
	held, err := s.rdb.ZRangeByScore(ctx, s.keys.User(user), &redis.ZRangeBy{Min: heldScore, Max: "+inf"}).Result()
	if err != nil {
		return "", fmt.Errorf("read user sandboxes: %w", err)
	}
	pipe := s.rdb.Pipeline()
	scores := make([]*redis.FloatCmd, len(held))
	for i, sid := range held {
		scores[i] = pipe.ZScore(ctx, s.keys.Warm(s.keys.Bucket(sid)), sid)
	}
	if len(held) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return "", fmt.Errorf("read user's warm sandboxes: %w", err)
		}
	}
	best, at := "", 0.0
	for i, c := range scores {
		if c.Err() == nil && (best == "" || c.Val() < at) {
			best, at = held[i], c.Val()
		}
	}
	return best, nil
}

// pruneUser drops user's held members without a record; it returns how many.
func (s *Store) pruneUser(ctx context.Context, user string) (int, error) {
	held, err := s.rdb.ZRangeByScore(ctx, s.keys.User(user), &redis.ZRangeBy{Min: heldScore, Max: "+inf"}).Result()
	if err != nil {
		return 0, fmt.Errorf("read user sandboxes: %w", err)
	}
	recs, err := s.records(ctx, held)
	if err != nil {
		return 0, err
	}
	have := make(map[string]bool, len(recs))
	for _, r := range recs {
		have[r.SandboxID] = true
	}
	n := 0
	for _, sid := range held {
		if !have[sid] {
			if err := s.userMember(ctx, user, sid, "leave"); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// userMember runs one membership change of user's quota set and returns
// the user's held count.
func (s *Store) userMember(ctx context.Context, user, sid, op string) error {
	_, err := s.userMemberCount(ctx, user, sid, op)
	return err
}

func (s *Store) userMemberCount(ctx context.Context, user, sid, op string) (int64, error) {
	n, err := scriptUserMember.Run(ctx, s.rdb, []string{s.keys.User(user)}, sid, op).Int64()
	if err != nil {
		return 0, fmt.Errorf("user quota (%s): %w", op, err)
	}
	return n, nil
}

// Unreserve gives back sid's capacity reservation after a failed create.
func (s *Store) Unreserve(ctx context.Context, sid, user string) error {
	var calls []*call
	if user != "" {
		calls = append(calls, &call{script: scriptUserMember, keys: []string{s.keys.User(user)}, args: []any{sid, "unreserve"}})
	}
	fleet := s.keys.fleetKeys()
	err := s.batch(ctx, calls, func(p redis.Pipeliner) {
		p.ZRem(ctx, fleet[1], sid)
		p.HDel(ctx, fleet[2], sid)
	})
	if err != nil {
		return fmt.Errorf("unreserve: %w", err)
	}
	return nil
}

func members(zs []redis.Z) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = z.Member.(string)
	}
	return out
}
