package statedb

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// DefaultPrefix is the configured prefix of the default pool. Layout 1 put
// every key under its hash tag ({default}) so that every script stayed in
// one Redis Cluster slot, on one node; layout 2 places its own tags, so its
// keys use the prefix without braces ("sandgate:default:") and layout 1's
// keys, under the prefix as written, are where Migrate reads them from.
const DefaultPrefix = "sandgate:{default}:"

// DefaultBuckets is how many buckets the indexes are split into: enough that
// a few nodes each get an even share (the tags sit at evenly spaced slots,
// so k nodes owning contiguous slot ranges get N/k buckets each, within one),
// few enough that a pass over all of them stays cheap.
const DefaultBuckets = 64

// Keys names every Redis key Sandgate uses; nothing else builds key strings.
// p is the prefix without braces; {…} is the hash tag that picks the slot.
//
// Per sandbox, in the sandbox's own slot:
//
//	p{sid}:sbx     HASH  user thread backend incarnation url state created_ms secret prewarm template [cap cap_sum]
//	p{sid}:lock    STRING bsm/redislock token, held while creating or destroying
//	p{sid}:egress  STRING JSON egress policy an admin set (outlives incarnations)
//	p{sid}:opts    STRING JSON create options: template, env, memory, metadata (outlive incarnations)
//	p{sid}:previews HASH link id -> "port|expires|key id|incarnation": preview links (listing only; TTL = the last expiry)
//	p{cap:sum}     STRING sid whose current incarnation holds the capability with this SHA-256
//	p{ses:sum}     STRING sealed status-page session whose id has this SHA-256; TTL = its expiry
//
// Per bucket b (a sandbox's bucket is fnv32a(sid) mod N), in the bucket's slot:
//
//	p{b}:reg       HASH  sid -> "ms|incarnation": every sandbox with a record (or about to have one)
//	p{b}:active    ZSET  sid -> last activity (ms): the idle-expiry index
//	p{b}:warm      ZSET  sid -> released at (ms): LRU order of the warm pool
//	p{b}:seq       STRING version of the bucket's count, bumped by every index change
//	p{b}:lease     STRING the replica that reaps and reconciles the bucket
//
// Fleet-wide, in the {fleet} slot (the limits that must stay exact):
//
//	p{fleet}:count     HASH  bucket -> "count|seq": each bucket's active + warm count, newest seq wins
//	p{fleet}:res       ZSET  sid -> deadline (ms): capacity held by creates in progress
//	p{fleet}:resuser   HASH  sid -> user of a reservation (status page)
//	p{fleet}:prewarm   ZSET  sid -> created at (ms): pre-started sandboxes no thread has claimed
//	p{fleet}:prewarmfp HASH  sid -> fingerprint of the spec it was made from (Record.Prewarm),
//	                   written and removed with its prewarm entry. An entry without one
//	                   (indexed by an earlier version) is offered only to a take that names
//	                   no fingerprint, and is evicted and trimmed as any; the reconciler
//	                   copies its record's fingerprint in (Store.Inconsistent)
//	p{fleet}:claims    HASH  fingerprint -> pre-started sandboxes of it taken (cumulative)
//	p{fleet}:holders   HASH  user -> sandboxes held (fair share)
//	p{fleet}:egress    SET   sids with an egress policy of their own (never offered a pre-started sandbox)
//	p{fleet}:events    STREAM lifecycle events, one JSON field "e" each; trimmed to events_retention and a length bound
//	p{fleet}:webhooks  HASH  endpoint id -> endpoint JSON (those the admin API registered); each endpoint's
//	                   consumer group on p{fleet}:events is "webhook:{id}"
//	p{fleet}:whstats   HASH  "{id}|delivered" ("|failed", "|dead") -> count
//	p{fleet}:whdead:{id} STREAM an endpoint's dead letters, length-bounded
//
// Per user, in the user's slot:
//
//	p{u:user}:sbx     ZSET  sid -> +inf (held) or reservation deadline (ms): per-user quotas
//	p{u:user}:aliases HASH  client-chosen sandbox id -> sid (DeerFlow's provisioner API)
//	p{u:user}:rate    STRING the user's create-rate GCRA arrival time (ms)
//	p{u:user}:sessions SET  keys of the user's status-page sessions (revoke all)
//
// Preview links, in the {preview} slot:
//
//	p{preview}:keys    HASH  "current" -> key id; key id -> "retire_after_unix|base64 secret" (0: current)
//	p{preview}:revoked ZSET  link id -> the link's expiry (unix s): revoked, until they would have expired
//	p{preview}:events  Pub/Sub "r <id> <expires>" (a revocation) or "k" (keys rotated)
//
// And: p{replicas} (ZSET
// instance -> last heartbeat), p{layout} (STRING: layout version and N).
type Keys struct {
	prefix  string // without braces
	legacy  string // as configured: where layout 1's keys are
	buckets []bucketKeys
	fleet   string // "p{fleet}:"
}

type bucketKeys struct{ reg, active, warm, seq, lease, field string }

// NewKeys returns the key set for prefix ("" = DefaultPrefix) with n
// buckets (<= 0: DefaultBuckets).
func NewKeys(prefix string, n int) Keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if n <= 0 {
		n = DefaultBuckets
	}
	p := strings.NewReplacer("{", "", "}", "").Replace(prefix)
	k := Keys{prefix: p, legacy: prefix, fleet: p + "{fleet}:", buckets: make([]bucketKeys, n)}
	for i := range k.buckets {
		t := p + "{" + bucketTag(i, n) + "}:"
		k.buckets[i] = bucketKeys{reg: t + "reg", active: t + "active", warm: t + "warm", seq: t + "seq",
			lease: t + "lease", field: strconv.Itoa(i)}
	}
	return k
}

// bucketTag is the hash tag of bucket i of n: "b<i>.<j>" with the smallest j
// whose slot lies in the i-th of n equal slot ranges, so buckets sit evenly
// over the slot space whatever the node count.
func bucketTag(i, n int) string {
	lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n
	for j := 0; ; j++ {
		tag := "b" + strconv.Itoa(i) + "." + strconv.Itoa(j)
		if s := int(crc16(tag)) % clusterSlots; s >= lo && s < hi {
			return tag
		}
	}
}

const clusterSlots = 16384

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the Redis Cluster slot of key (its hash tag's, if it has one).
func slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key)) % clusterSlots
}

// Buckets is the number of buckets N.
func (k Keys) Buckets() int { return len(k.buckets) }

// Bucket is sid's bucket.
func (k Keys) Bucket(sid string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sid))
	return int(h.Sum32() % uint32(len(k.buckets)))
}

func (k Keys) tag(sid string) string { return k.prefix + "{" + sid + "}:" }

// Sandbox is the record hash of one sandbox.
func (k Keys) Sandbox(sid string) string { return k.tag(sid) + "sbx" }

// Lock is the provisioning/destroy lock of one sandbox.
func (k Keys) Lock(sid string) string { return k.tag(sid) + "lock" }

// Egress is the key of a sandbox's egress policy override.
func (k Keys) Egress(sid string) string { return k.tag(sid) + "egress" }

// Options is the key of a thread's create options (pool.Options).
func (k Keys) Options(sid string) string { return k.tag(sid) + "opts" }

// Report marks one occurrence (what) about a sandbox as reported
// (Store.ClaimReport).
func (k Keys) Report(sid, what string) string { return k.tag(sid) + "rep:" + what }

// Cap is the index key of a capability's SHA-256 (hex).
func (k Keys) Cap(sumHex string) string { return k.prefix + "{cap:" + sumHex + "}" }

// Session is the key of the status-page session whose id hashes to sumHex.
func (k Keys) Session(sumHex string) string { return k.prefix + "{ses:" + sumHex + "}" }

// Sessions is the set of user's status-page session keys.
func (k Keys) Sessions(user string) string { return k.prefix + "{u:" + user + "}:sessions" }

// Reg is bucket b's registry of recorded sandboxes.
func (k Keys) Reg(b int) string { return k.buckets[b].reg }

// Active is bucket b's idle-expiry index of active sandboxes.
func (k Keys) Active(b int) string { return k.buckets[b].active }

// Warm is bucket b's LRU index of released sandboxes.
func (k Keys) Warm(b int) string { return k.buckets[b].warm }

// Lease is the key of bucket b's lease.
func (k Keys) Lease(b int) string { return k.buckets[b].lease }

// Prewarm indexes the pre-started sandboxes no thread has claimed, oldest first.
func (k Keys) Prewarm() string { return k.fleet + "prewarm" }

// PrewarmFP maps each indexed pre-started sandbox to its spec's fingerprint.
func (k Keys) PrewarmFP() string { return k.fleet + "prewarmfp" }

// Claims counts the pre-started sandboxes taken, per fingerprint.
func (k Keys) Claims() string { return k.fleet + "claims" }

// Creating holds the capacity reservations of creates in progress.
func (k Keys) Creating() string { return k.fleet + "res" }

// User is the per-user quota set of user.
func (k Keys) User(user string) string { return k.prefix + "{u:" + user + "}:sbx" }

// Aliases maps the ids user's provisioner-API clients chose to sandbox ids.
func (k Keys) Aliases(user string) string { return k.prefix + "{u:" + user + "}:aliases" }

// CreateRate is the key of one user's fleet-wide create rate.
func (k Keys) CreateRate(user string) string { return k.prefix + "{u:" + user + "}:rate" }

// Events is the fleet's stream of lifecycle events (internal/events).
func (k Keys) Events() string { return k.fleet + "events" }

// Webhooks holds the webhook endpoints the admin API registered.
func (k Keys) Webhooks() string { return k.fleet + "webhooks" }

// WebhookStats counts each endpoint's deliveries.
func (k Keys) WebhookStats() string { return k.fleet + "whstats" }

// WebhookDeadPrefix + an endpoint id is its stream of dead letters.
func (k Keys) WebhookDeadPrefix() string { return k.fleet + "whdead:" }

// Replicas holds each replica's last heartbeat.
func (k Keys) Replicas() string { return k.prefix + "{replicas}" }

// Layout holds the layout version and bucket count of this prefix.
func (k Keys) Layout() string { return k.prefix + "{layout}" }

// fleetKeys are the KEYS of every fleet script, in this order.
func (k Keys) fleetKeys() []string {
	return []string{k.fleet + "count", k.fleet + "res", k.fleet + "resuser", k.fleet + "prewarm",
		k.fleet + "holders", k.fleet + "egress", k.PrewarmFP(), k.Claims()}
}

// bucketKeys are the KEYS of every bucket script, in this order.
func (k Keys) bucketKeys(b int) []string {
	bk := k.buckets[b]
	return []string{bk.reg, bk.active, bk.warm, bk.seq}
}

// Previews is the hash of a sandbox's preview links (id -> link), listed
// to its owner; it expires with the last of them.
func (k Keys) Previews(sid string) string { return k.tag(sid) + "previews" }

// PreviewKeys is the hash of the fleet's preview-link signing keys.
func (k Keys) PreviewKeys() string { return k.prefix + "{preview}:keys" }

// PreviewRevoked is the ZSET of revoked link ids, scored by the links'
// expiry (unix seconds), trimmed once they expired.
func (k Keys) PreviewRevoked() string { return k.prefix + "{preview}:revoked" }

// PreviewChannel is the Pub/Sub channel of revocations and key rotations.
func (k Keys) PreviewChannel() string { return k.prefix + "{preview}:events" }
