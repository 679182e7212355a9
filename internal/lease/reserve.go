package lease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptReserve takes one unit of fleet-wide capacity for a create. Capacity
// counts active + warm + creating + prewarm; expired reservations (a replica
// that died mid-create) are dropped first. Outcomes:
//
//	{'ok'}                 reserved (also when max <= 0: no cap)
//	{'prewarm', sid}       mode 'claim' only: nothing reserved; take the
//	                       pre-started sandbox sid instead (Store.TakePrewarm)
//	{'evict', sid}         destroy warm or pre-started sandbox sid, then
//	                       reserve again
//	{'over'}               full, nothing warm, soft mode: reserved beyond the cap
//	{'full'}               full, nothing warm, hard mode: not reserved
//	{'user_max', n}        the user holds n >= user_max sandboxes, none warm
//	{'user_creates', n}    the user has n >= user_creates creates in progress
//	{'share', n}           hard mode, full, other users hold sandboxes and the
//	                       user holds its fair share n (max / users) or more
//
// Per-user counts come from the owners hash (sid -> user), written with
// every record and reservation. An owners entry counts only while its sid
// sits in active, warm or creating, exactly like the fleet count; entries in
// none (forgotten, claimed, unreserved, expired) are dropped here, so
// Unreserve and an expired reservation need no extra bookkeeping. The scan
// is O(fleet) and runs only on a create, and only when a per-user limit is
// set or a hard cap is full; without them the script is the plain cap check.
//
// Eviction prefers, in order: the user's own oldest warm sandbox when it is
// at a per-user limit or its fair share; at a full cap, the oldest
// pre-started sandbox (it holds nobody's work), then the oldest warm
// sandbox of a user at or over its fair share (hard mode), then the oldest
// warm sandbox.
//
// Two kinds of call besides a plain create (ARGV[9]):
//   - 'claim', a new thread that may take a pre-started sandbox: once the
//     per-user checks pass, the oldest one is offered whatever the fleet's
//     fullness (taking it moves its unit to the thread: the count is
//     unchanged), and only without one is capacity reserved as usual. A
//     sandbox with an egress policy of its own (KEYS[6]) is a plain create:
//     a pre-started one runs the fleet's;
//   - 'prewarm', the refill of the pre-started pool (no user): it reserves
//     free capacity only, never evicts, never goes over, owns nothing.
//
// KEYS: active, warm, creating, owners, prewarm, egress policy of sid.
// ARGV: sid, max, now, deadline, mode(soft|hard), user, user_max, user_creates, kind(empty|claim|prewarm).
var scriptReserve = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[3])
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
  return {'ok'}
end
local sid, max, hard, user = ARGV[1], tonumber(ARGV[2]), ARGV[5] == 'hard', ARGV[6]
local umax, ucreates, kind = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
if kind == 'claim' and redis.call('EXISTS', KEYS[6]) == 1 then kind = '' end
local n = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[5])
local full = max > 0 and n >= max
local function take()
  redis.call('ZADD', KEYS[3], ARGV[4], sid)
  if user ~= '' then redis.call('HSET', KEYS[4], sid, user) end
end
if kind == 'prewarm' then
  if full then return {'full'} end
  take()
  return {'ok'}
end
local pre = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
local function offer()
  if kind == 'claim' and pre then return {'prewarm', pre} end
  if full and pre then return {'evict', pre} end
end
local function oldest(warm)
  local best
  for _, w in ipairs(warm) do
    if not best or w[3] < best[3] then best = w end
  end
  return best and best[1]
end
if umax > 0 or ucreates > 0 or (full and hard) then
  local per, warm, mine, mineWarm, creating = {}, {}, 0, {}, 0
  local owners = redis.call('HGETALL', KEYS[4])
  for i = 1, #owners, 2 do
    local s, u = owners[i], owners[i + 1]
    local w = redis.call('ZSCORE', KEYS[2], s)
    local live = w or redis.call('ZSCORE', KEYS[1], s)
    local c = false
    if not live then
      c = redis.call('ZSCORE', KEYS[3], s)
      live = c
    end
    if not live then
      redis.call('HDEL', KEYS[4], s)
    else
      per[u] = (per[u] or 0) + 1
      if w then warm[#warm + 1] = {s, u, tonumber(w)} end
      if u == user then
        mine = mine + 1
        if c then creating = creating + 1 end
        if w then mineWarm[#mineWarm + 1] = {s, u, tonumber(w)} end
      end
    end
  end
  if umax > 0 and mine >= umax then
    local v = oldest(mineWarm)
    if v then return {'evict', v} end
    return {'user_max', tostring(mine)}
  end
  if ucreates > 0 and creating >= ucreates then return {'user_creates', tostring(creating)} end
  if full and hard then
    local users = 0
    for _ in pairs(per) do users = users + 1 end
    if not per[user] then users = users + 1 end
    local share = math.max(1, math.floor(max / users))
    if users > 1 and mine >= share then
      local v = oldest(mineWarm)
      if v then return {'evict', v} end
      return {'share', tostring(share)}
    end
    local o = offer()
    if o then return o end
    local over = {}
    for _, w in ipairs(warm) do
      if per[w[2]] >= share then over[#over + 1] = w end
    end
    local v = oldest(over) or oldest(warm)
    if v then return {'evict', v} end
    return {'full'}
  end
end
local o = offer()
if o then return o end
if not full then
  take()
  return {'ok'}
end
local lru = redis.call('ZRANGE', KEYS[2], 0, 0)
if lru[1] then return {'evict', lru[1]} end
if not hard then
  take()
  return {'over'}
end
return {'full'}
`)

// ReserveRequest asks for a capacity unit for one create.
type ReserveRequest struct {
	SandboxID string
	User      string
	// Max caps the fleet (<= 0: no cap); Hard refuses at it instead of
	// going beyond.
	Max  int
	Hard bool
	// MaxPerUser caps the user's sandboxes (active + warm + creating) and
	// MaxCreatesPerUser its creates in progress; <= 0 = no limit.
	MaxPerUser        int
	MaxCreatesPerUser int
	// Now drops expired reservations; Deadline is when this one expires.
	Now, Deadline time.Time
	// Kind is "" (a create), KindClaim or KindPrewarm (see scriptReserve).
	Kind string
}

// Kinds of ReserveRequest.
const (
	KindClaim   = "claim"
	KindPrewarm = "prewarm"
)

// ReserveResult is the outcome of Reserve.
type ReserveResult struct {
	Outcome string // "ok", "prewarm", "evict", "over", "full", "user_max", "user_creates", "share"
	Victim  string // with "evict": the sandbox to destroy; with "prewarm": the one to take
	// Held is the user's count with "user_max" and "user_creates", its fair
	// share with "share".
	Held int
}

// Reserve takes a capacity unit for req.SandboxID (see scriptReserve).
func (s *Store) Reserve(ctx context.Context, req ReserveRequest) (ReserveResult, error) {
	mode := "soft"
	if req.Hard {
		mode = "hard"
	}
	keys := []string{s.keys.Active(), s.keys.Warm(), s.keys.Creating(), s.keys.Owners(), s.keys.Prewarm(),
		s.keys.Egress(req.SandboxID)}
	res, err := scriptReserve.Run(ctx, s.rdb, keys, req.SandboxID, req.Max, ms(req.Now), ms(req.Deadline), mode,
		req.User, req.MaxPerUser, req.MaxCreatesPerUser, req.Kind).StringSlice()
	if err != nil {
		return ReserveResult{}, fmt.Errorf("reserve capacity: %w", err)
	}
	out := ReserveResult{Outcome: res[0]}
	if len(res) > 1 {
		if out.Outcome == "evict" || out.Outcome == "prewarm" {
			out.Victim = res[1]
		} else if out.Held, err = strconv.Atoi(res[1]); err != nil {
			return ReserveResult{}, fmt.Errorf("reserve capacity: bad count %q: %w", res[1], err)
		}
	}
	return out, nil
}

// Unreserve gives back sid's capacity reservation after a failed create; its
// owners entry is dropped by the next Reserve that scans.
func (s *Store) Unreserve(ctx context.Context, sid string) error {
	if err := s.rdb.ZRem(ctx, s.keys.Creating(), sid).Err(); err != nil {
		return fmt.Errorf("unreserve: %w", err)
	}
	return nil
}
