package lease

import "strings"

// DefaultPrefix puts every key of the default pool in one Redis Cluster hash
// slot ({pool}), so the multi-key Lua scripts below are legal on a Cluster.
const DefaultPrefix = "sandgate:{default}:"

// Keys names every Redis key Sandgate uses; nothing else builds key strings.
//
//	{p}sbx:{sid}   HASH  user thread backend incarnation url state created_ms secret [cap cap_sum]
//	{p}active      ZSET  sid -> last activity (ms): the idle-expiry index
//	{p}warm        ZSET  sid -> released at (ms): LRU order of the warm pool
//	{p}creating    ZSET  sid -> reservation deadline (ms): capacity held by creates in progress
//	{p}prewarm     ZSET  sid -> created at (ms): pre-started sandboxes no thread has claimed yet
//	{p}lock:{sid}  STRING bsm/redislock token, held while creating or destroying
//	{p}aliases     HASH  "{user}:{client-chosen sandbox id}" -> sid (DeerFlow's provisioner API)
//	{p}caps        HASH  sha256hex(capability) -> sid: the capability URL index
//	{p}owners      HASH  sid -> user of every recorded or reserved sandbox: per-user quotas
//	{p}egress:{sid} STRING JSON egress policy an admin set for the sandbox (outlives its incarnations)
//	{p}rate:{user} STRING the user's create-rate GCRA arrival time (ms), expiring when its bucket is full
//	{p}events      PUBSUB channel of lifecycle events (internal/events), JSON
//	{p}events:recent LIST  the latest lifecycle events, newest first, trimmed
//	{p}replicas    ZSET  instance -> last heartbeat (ms): the replicas alive
type Keys struct {
	prefix   string
	active   string
	warm     string
	creating string
	prewarm  string
	aliases  string
	caps     string
	owners   string
}

// NewKeys returns the key set for prefix ("" = DefaultPrefix). A prefix
// without a hash tag gets none added: the operator chose it.
func NewKeys(prefix string) Keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keys{
		prefix:   prefix,
		active:   prefix + "active",
		warm:     prefix + "warm",
		creating: prefix + "creating",
		prewarm:  prefix + "prewarm",
		aliases:  prefix + "aliases",
		caps:     prefix + "caps",
		owners:   prefix + "owners",
	}
}

// Prefix is the common prefix of all keys.
func (k Keys) Prefix() string { return k.prefix }

// Sandbox is the record hash of one sandbox.
func (k Keys) Sandbox(sid string) string { return k.prefix + "sbx:" + sid }

// Active is the idle-expiry index of active sandboxes.
func (k Keys) Active() string { return k.active }

// Warm is the LRU index of released sandboxes.
func (k Keys) Warm() string { return k.warm }

// Creating holds capacity reservations of creates in progress.
func (k Keys) Creating() string { return k.creating }

// Prewarm indexes the pre-started sandboxes no thread has claimed, oldest first.
func (k Keys) Prewarm() string { return k.prewarm }

// Aliases maps ids chosen by provisioner-API clients to sandbox ids.
func (k Keys) Aliases() string { return k.aliases }

// Caps indexes capabilities by their SHA-256.
func (k Keys) Caps() string { return k.caps }

// Owners maps sandbox ids to their users, for per-user quotas.
func (k Keys) Owners() string { return k.owners }

// Lock is the provisioning/destroy lock of one sandbox.
func (k Keys) Lock(sid string) string { return k.prefix + "lock:" + sid }

// Egress is the key of a sandbox's egress policy override.
func (k Keys) Egress(sid string) string { return k.prefix + "egress:" + sid }

// CreateRate is the key of one user's fleet-wide create rate.
func (k Keys) CreateRate(user string) string { return k.prefix + "rate:" + user }

// Events is the Pub/Sub channel of lifecycle events.
func (k Keys) Events() string { return k.prefix + "events" }

// EventsRecent is the bounded list of the latest lifecycle events.
func (k Keys) EventsRecent() string { return k.prefix + "events:recent" }

// Replicas holds each replica's last heartbeat.
func (k Keys) Replicas() string { return k.prefix + "replicas" }

// SandboxIDFromKey returns the sid of a record key, or "" if it is not one.
func (k Keys) SandboxIDFromKey(key string) string {
	sid, ok := strings.CutPrefix(key, k.prefix+"sbx:")
	if !ok {
		return ""
	}
	return sid
}
