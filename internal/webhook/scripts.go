package webhook

import "github.com/redis/go-redis/v9"

// The conditional writes of delivery. Every key is in the fleet's slot.

// scriptFinish ends an event's delivery to one endpoint: acknowledge it in
// the endpoint's group and, only if that removed it from the pending list,
// count the outcome and, for a dead letter, keep it. A replica that lost
// the event to a claim (it was too slow, not dead) and finishes second
// counts nothing and keeps no second dead letter, so the stats count
// events, not replicas.
//
// KEYS[1] events stream, KEYS[2] stats hash, KEYS[3] dead-letter stream.
// ARGV[1] group, ARGV[2] entry id, ARGV[3] stats field, ARGV[4] dead
// letters kept (0: not a dead letter), ARGV[5..] the dead letter's fields.
// Returns 1 when this call finished it, 0 when it was finished already.
var scriptFinish = redis.NewScript(`
local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if n == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
  if ARGV[4] ~= '0' then
    redis.call('XADD', KEYS[3], 'MAXLEN', ARGV[4], '*', unpack(ARGV, 5))
  end
end
return n
`)

// scriptTouch keeps an event a replica is still retrying from being
// claimed by another: it resets the entry's idle time (XCLAIM to the same
// consumer, JUSTID), only while the entry is pending with this consumer.
// Returns 0 when it is not (another replica took it, or it was finished):
// the caller stops.
//
// KEYS[1] events stream. ARGV[1] group, ARGV[2] entry id, ARGV[3] consumer.
var scriptTouch = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
  return 1
end
return 0
`)
