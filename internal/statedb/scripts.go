package statedb

import "github.com/redis/go-redis/v9"

// Every conditional write is one of these scripts, and each touches one
// Redis Cluster slot: a sandbox's record (its own slot), one bucket's
// indexes, the {fleet} limits or one user's keys. Keys are always passed in
// KEYS, never built inside Lua. Scores are milliseconds supplied by the
// caller's clock, so tests can move time without sleeping.
//
// A change that spans slots is a sequence of these, ordered so that a
// replica dying between two steps leaves a state the reconciler repairs
// (Store.Repair): a bucket registers a sandbox before its record is
// written and forgets it after its record is deleted, so every record is
// found from its bucket; the record decides (state, incarnation) and the
// indexes follow it. Each Store method says its steps and what a crash
// after each leaves.

// Record scripts. KEYS[1] is the record.

// scriptRecPut writes a record. ARGV: mode, state, incarnation, field/value
// pairs... Mode "replace" (the caller holds the sandbox's lock) writes it
// whatever was there; a record of the same incarnation keeps its capability
// and its freeze mark (the processes are still frozen), a new incarnation
// drops both and returns the old capability's index sum for the caller to
// delete. Mode "absent" writes only if there is no record (returns 1 or 0).
var scriptRecPut = redis.NewScript(`
local old = redis.call('HMGET', KEYS[1], 'incarnation', 'cap', 'cap_sum', 'frozen')
if ARGV[1] == 'absent' and old[1] then return 0 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', ARGV[2], unpack(fields))
if ARGV[1] == 'absent' then return 1 end
if old[1] == ARGV[3] and old[4] then redis.call('HSET', KEYS[1], 'frozen', old[4]) end
if old[3] then
  if old[1] == ARGV[3] then
    redis.call('HSET', KEYS[1], 'cap', old[2], 'cap_sum', old[3])
  else
    return old[3]
  end
end
return ''
`)

// scriptRecMove moves a record from one state to another, only if it holds
// the given incarnation (” = any) and, for a release, the given user and
// thread. ARGV: from, to, incarnation, user, thread, now (ms). Returns 1
// (moved, or already in state to with that incarnation), 0 (no record, or
// not in state from) or -1 (the record is another user's or thread's).
// A move to active is what every replica does before it caches a route
// (Activate), so it stamps seen_ms, which scriptRecFreeze compares with its
// cutoff, and refuses a frozen record: that one is thawed under the lock
// first.
var scriptRecMove = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'incarnation', 'user', 'thread', 'frozen')
if not st[1] then return 0 end
if ARGV[4] ~= '' and (st[3] ~= ARGV[4] or st[4] ~= ARGV[5]) then return -1 end
if ARGV[3] ~= '' and st[2] ~= ARGV[3] then return 0 end
if ARGV[2] == 'active' then
  if st[5] or (st[1] ~= 'active' and st[1] ~= ARGV[1]) then return 0 end
  redis.call('HSET', KEYS[1], 'state', 'active', 'seen_ms', ARGV[6])
  return 1
end
if st[1] == ARGV[2] then return 1 end
if st[1] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
return 1
`)

// scriptRecClaim marks a sandbox as being destroyed and returns its record:
// the exactly-once gate of every destroy. Of the replicas racing on one
// sandbox, one gets the record, the others {state} (or nil when there is
// none). Conditions: the incarnation (” = any) and the state it must be in
// (” = any but destroying). A claimed sandbox's capability opens nothing
// any more (ByCapability refuses a record being destroyed).
// ARGV: incarnation, state. Returns HGETALL, {state, incarnation} or nil.
var scriptRecClaim = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'incarnation')
if not st[1] then return nil end
if (ARGV[1] ~= '' and st[2] ~= ARGV[1]) or (ARGV[2] ~= '' and st[1] ~= ARGV[2])
  or (ARGV[2] == '' and st[1] == 'destroying') then
  return {st[1], st[2]}
end
redis.call('HSET', KEYS[1], 'state', 'destroying')
return redis.call('HGETALL', KEYS[1])
`)

// scriptRecDelete deletes a record if it names the incarnation (” = any)
// and, when ARGV[2] is set, is in that state. Returns {user, cap_sum,
// state} of the deleted record, or nil.
var scriptRecDelete = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'incarnation', 'user', 'cap_sum', 'state')
if not st[1] then return nil end
if ARGV[1] ~= '' and st[1] ~= ARGV[1] then return nil end
if ARGV[2] ~= '' and st[4] ~= ARGV[2] then return nil end
local rec = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return rec
`)

// Bucket scripts. KEYS: reg, active, warm, seq of one bucket.

// scriptIndex puts sid where its record's state says: 'active' (scored
// activity, never lowered), 'warm' (scored release), 'none' (in neither:
// being destroyed, or pre-started, whose index is the fleet's), 'drop' (out
// of the registry too: the record is gone), 'register' (the registry only,
// before a record is written). ARGV: sid, state, score,
// registry value ("ms|incarnation"; ” = keep, 'nx' prefix = only if
// absent), report. With report '1' (a change of the bucket's count the
// caller reports to the fleet) the seq is bumped and {count, seq} of the
// bucket after the change returned; moves between active and warm, which
// leave the count as it was, skip that work.
var scriptIndex = redis.NewScript(`
local sid, state = ARGV[1], ARGV[2]
if state == 'drop' then
  redis.call('HDEL', KEYS[1], sid)
elseif ARGV[4] ~= '' then
  if string.sub(ARGV[4], 1, 2) == 'nx' then
    redis.call('HSETNX', KEYS[1], sid, string.sub(ARGV[4], 3))
  else
    redis.call('HSET', KEYS[1], sid, ARGV[4])
  end
end
if state == 'active' then
  redis.call('ZREM', KEYS[3], sid)
  redis.call('ZADD', KEYS[2], 'GT', ARGV[3], sid)
elseif state == 'warm' then
  redis.call('ZREM', KEYS[2], sid)
  redis.call('ZADD', KEYS[3], ARGV[3], sid)
elseif state ~= 'register' then
  redis.call('ZREM', KEYS[2], sid)
  redis.call('ZREM', KEYS[3], sid)
end
if ARGV[5] ~= '1' then return {0, 0} end
local seq = redis.call('INCR', KEYS[4])
return {redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]), seq}
`)

// scriptTake takes sid out of index KEYS[1] if its score there is at or
// below the cutoff: the schedule gate of the reaper and eviction (the
// record, claimed next, is the destroy gate), and bumps the bucket's seq
// (KEYS[2], absent for the fleet's pre-started index).
// ARGV: sid, cutoff. Returns 1 or nil.
var scriptTake = redis.NewScript(`
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return nil end
redis.call('ZREM', KEYS[1], ARGV[1])
if KEYS[2] then redis.call('INCR', KEYS[2]) end
return 1
`)

// scriptTouch refreshes the activity of the sandboxes of one bucket that a
// replica served since its last flush. A pair no longer active with that
// incarnation is reported back (1-based index) so the replica drops its
// cached route. KEYS: reg, active. ARGV: now, sid1, inc1, ..., sidN, incN.
var scriptTouch = redis.NewScript(`
local stale = {}
for i = 2, #ARGV, 2 do
  local sid, inc = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', KEYS[1], sid)
  local bar = v and string.find(v, '|', 1, true)
  if bar and string.sub(v, bar + 1) == inc and redis.call('ZSCORE', KEYS[2], sid) then
    redis.call('ZADD', KEYS[2], 'XX', 'GT', ARGV[1], sid)
  else
    stale[#stale + 1] = i / 2
  end
end
return stale
`)
