package lease

import "github.com/redis/go-redis/v9"

// Every conditional write is one of these scripts. Keys are always passed in
// KEYS (never built inside Lua) so they hash to the pool's one Cluster slot.
// Scores are milliseconds supplied by the caller's clock, so tests can move
// time without sleeping.

// scriptPutActive records a sandbox as active after a create or adoption. The
// caller holds the sandbox's lock, so the write is unconditional. A record of
// the same incarnation keeps its capability; a new incarnation starts without
// one, and the old incarnation's capability leaves the index.
// The sandbox's owner goes into the owners index (per-user quotas).
// KEYS: sbx, active, warm, creating, caps, owners. ARGV: sid, now, incarnation, field/value pairs...
var scriptPutActive = redis.NewScript(`
local old = redis.call('HMGET', KEYS[1], 'incarnation', 'cap', 'cap_sum')
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'active', unpack(fields))
if old[3] then
  if old[1] == ARGV[3] then
    redis.call('HSET', KEYS[1], 'cap', old[2], 'cap_sum', old[3])
  else
    redis.call('HDEL', KEYS[5], old[3])
  end
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[6], ARGV[1], redis.call('HGET', KEYS[1], 'user') or '')
return 1
`)

// scriptPutWarm records an adopted sandbox straight into the warm pool (the
// reconciler's path: nobody is using it yet).
// KEYS: sbx, active, warm, owners. ARGV: sid, now, field/value pairs...
var scriptPutWarm = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], 'state', 'warm', unpack(fields))
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], redis.call('HGET', KEYS[1], 'user') or '')
return 1
`)

// scriptActivate moves a warm sandbox back to active, only if the record
// still names the incarnation the caller checked for liveness. An already
// active record of that incarnation counts as success (another replica won).
// KEYS: sbx, active, warm. ARGV: sid, incarnation, now. Returns 1 or 0.
var scriptActivate = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'incarnation')
if st[2] ~= ARGV[2] then return 0 end
if st[1] == 'warm' then
  redis.call('HSET', KEYS[1], 'state', 'active')
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  return 1
end
if st[1] == 'active' then
  redis.call('ZADD', KEYS[2], 'GT', ARGV[3], ARGV[1])
  return 1
end
return 0
`)

// scriptRelease parks an active sandbox in the warm pool, scored by release
// time (LRU order for eviction, idle expiry from release), only if the record
// is the caller's: its user and thread must be the ones released.
// KEYS: sbx, active, warm. ARGV: sid, now, user, thread. Returns 1 (warm
// now), 0 (no record) or -1 (the record is another user's or thread's).
var scriptRelease = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'user', 'thread')
if not st[1] then return 0 end
if st[2] ~= ARGV[3] or st[3] ~= ARGV[4] then return -1 end
if st[1] == 'warm' then return 1 end
if st[1] ~= 'active' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'warm')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
`)

// scriptClaim marks a sandbox as being destroyed and takes it out of both
// indexes, returning its record. It is the exactly-once gate for every
// destroy: of the replicas racing on one sandbox, one gets the record, the
// others nil. Optional conditions: the incarnation must match (ARGV[2] ~= ”),
// and the sandbox must sit in index KEYS[4] with a score <= ARGV[3] (expiry).
// A claimed sandbox's capability opens nothing any more (ByCapability
// refuses a record being destroyed); Forget removes its index entry.
// KEYS: sbx, active, warm, index-or-sbx, prewarm. ARGV: sid, incarnation, cutoff (” = none).
var scriptClaim = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'incarnation')
if not st[1] then return nil end
if ARGV[2] ~= '' and st[2] ~= ARGV[2] then return nil end
if ARGV[3] ~= '' then
  local score = redis.call('ZSCORE', KEYS[4], ARGV[1])
  if not score or tonumber(score) > tonumber(ARGV[3]) then return nil end
end
redis.call('HSET', KEYS[1], 'state', 'destroying')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
return redis.call('HGETALL', KEYS[1])
`)

// scriptForget deletes a record (after its sandbox was destroyed or found
// dead), only if it still names the given incarnation (” = any), with its
// capability's index entry and its owners entry.
// KEYS: sbx, active, warm, caps, owners, prewarm. ARGV: sid, incarnation. Returns 1 or 0.
var scriptForget = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'incarnation', 'cap_sum')
if not st[1] then return 0 end
if ARGV[2] ~= '' and st[1] ~= ARGV[2] then return 0 end
if st[2] then redis.call('HDEL', KEYS[4], st[2]) end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
return 1
`)

// scriptTouch refreshes the activity score of the sandboxes one replica
// served since its last flush, in one round trip. A pair whose record is no
// longer active with that incarnation is reported back (1-based index) so
// the replica drops its cached route.
// KEYS: active, sbx1..sbxN. ARGV: now, sid1, inc1, ..., sidN, incN.
var scriptTouch = redis.NewScript(`
local stale = {}
for i = 2, #KEYS do
  local sid = ARGV[2 * (i - 1)]
  local inc = ARGV[2 * (i - 1) + 1]
  local st = redis.call('HMGET', KEYS[i], 'state', 'incarnation')
  if st[1] == 'active' and st[2] == inc then
    redis.call('ZADD', KEYS[1], 'XX', 'GT', ARGV[1], sid)
  else
    stale[#stale + 1] = i - 1
  end
end
return stale
`)
