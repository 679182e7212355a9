// Package lease keeps the fleet-wide sandbox state in Redis: one record per
// sandbox, the indexes split into buckets, the capacity reservations and the
// per-sandbox provisioning lock. Every conditional write is one Lua script
// in one Redis Cluster slot (scripts.go says how the steps of a change that
// spans slots are ordered), so replicas never interleave a read and a write.
package statedb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// Store reads and writes sandbox records. It has no clock of its own: every
// time comes from the caller, so tests inject one.
type Store struct {
	rdb  redis.UniversalClient
	keys Keys
	// crash, when set (tests), is asked after each step of a change that
	// spans slots; an error stops the change there, as a replica dying would.
	crash func(op string, step int) error
}

// NewStore returns a Store over rdb with the given key prefix and
// DefaultBuckets buckets.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return NewStoreBuckets(rdb, prefix, 0)
}

// NewStoreBuckets returns a Store with n buckets (<= 0: DefaultBuckets).
func NewStoreBuckets(rdb redis.UniversalClient, prefix string, n int) *Store {
	return &Store{rdb: rdb, keys: NewKeys(prefix, n)}
}

// Keys returns the key set in use.
func (s *Store) Keys() Keys { return s.keys }

// Client returns the Redis client (for the lock and health checks).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// step reports the end of step n of op to the test hook.
func (s *Store) step(op string, n int) error {
	if s.crash == nil {
		return nil
	}
	return s.crash(op, n)
}

// Get returns the record of sid; ok is false when there is none.
func (s *Store) Get(ctx context.Context, sid string) (state.Record, bool, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Sandbox(sid)).Result()
	if err != nil {
		return state.Record{}, false, fmt.Errorf("read record: %w", err)
	}
	rec, ok := recordFromHash(sid, h)
	return rec, ok, nil
}

// index runs scriptIndex on sid's bucket and returns the bucket's count
// and seq after it, for the caller to report.
func (s *Store) index(ctx context.Context, sid, state string, at time.Time, reg string) (bucketCount, error) {
	return s.indexReport(ctx, sid, state, at, reg, "1")
}

// move runs scriptIndex for a change that leaves the bucket's count as it
// was (active and warm, the registry alone).
func (s *Store) move(ctx context.Context, sid, state string, at time.Time, reg string) error {
	_, err := s.indexReport(ctx, sid, state, at, reg, "0")
	return err
}

func (s *Store) indexReport(ctx context.Context, sid, state string, at time.Time, reg, report string) (bucketCount, error) {
	b := s.keys.Bucket(sid)
	v, err := scriptIndex.Run(ctx, s.rdb, s.keys.bucketKeys(b), sid, state, ms(at), reg, report).Int64Slice()
	if err != nil {
		return bucketCount{}, fmt.Errorf("index sandbox: %w", err)
	}
	return bucketCount{bucket: b, count: v[0], seq: v[1]}, nil
}

// bucketCount is a bucket's active + warm count at version seq.
type bucketCount struct {
	bucket     int
	count, seq int64
}

func regValue(now time.Time, incarnation string) string {
	return strconv.FormatInt(ms(now), 10) + "|" + incarnation
}

// PutActive writes rec as active with activity now. Hold the sandbox's lock.
// Steps: (1) bucket: registered and indexed active; (2) record written;
// (3) the old incarnation's capability index entry deleted, the user holds
// it, the fleet releases its reservation and takes the bucket's count.
// A crash after (1) leaves an index entry without a record (or with the
// previous record): Repair drops it or follows the record. After (2): the
// reservation expires, the bucket's count reaches the fleet with its next
// change or sync, Repair restores the user's membership.
func (s *Store) PutActive(ctx context.Context, rec state.Record, now time.Time) error {
	commit, err := s.RecordActive(ctx, rec, now)
	if err != nil {
		return err
	}
	return commit(ctx)
}

// RecordActive runs PutActive's steps (1) and (2), after which the record
// serves, and returns step (3) for the caller to run once it has answered:
// until then the fleet counts the sandbox by its reservation, exactly once.
func (s *Store) RecordActive(ctx context.Context, rec state.Record, now time.Time) (commit func(context.Context) error, err error) {
	sid := rec.SandboxID
	bc, err := s.index(ctx, sid, "active", now, regValue(now, rec.Incarnation))
	if err != nil {
		return nil, fmt.Errorf("write active record: %w", err)
	}
	if err := s.step("put_active", 1); err != nil {
		return nil, err
	}
	args := append([]any{"replace", string(state.StateActive), rec.Incarnation}, fields(rec, now)...)
	oldCap, err := scriptRecPut.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, args...).Text()
	if err != nil {
		return nil, fmt.Errorf("write active record: %w", err)
	}
	if err := s.step("put_active", 2); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return s.commit(ctx, sid, rec.User, oldCap, "hold", bc, prewarmEntry{})
	}, nil
}

// commit is the last step of a create or a destroy: the capability index
// entry capSum (if any) deleted, user's membership changed by op (if a
// user), the fleet's reservation of sid released, sid in the pre-started
// index with its fingerprint (pw) or out of it (pw's zero value), bc
// reported. One round trip per node.
func (s *Store) commit(ctx context.Context, sid, user, capSum, op string, bc bucketCount, pw prewarmEntry) error {
	held := ""
	if user != "" {
		n, err := s.userMemberCount(ctx, user, sid, op)
		if err != nil {
			return err
		}
		held = strconv.FormatInt(n, 10)
	}
	calls := []*call{{script: scriptFleetCommit, keys: s.keys.fleetKeys(),
		args: []any{sid, bc.bucket, bc.count, bc.seq, user, held, pw.score, pw.fp}}}
	err := s.batch(ctx, calls, func(p redis.Pipeliner) {
		if capSum != "" {
			p.Del(ctx, s.keys.Cap(capSum))
		}
	})
	if err != nil {
		return fmt.Errorf("commit %s: %w", sid, err)
	}
	return nil
}

// prewarmEntry is a pre-started sandbox's entry in the fleet's index (its
// score, "" = not in it) and its fingerprint.
type prewarmEntry struct{ score, fp string }

// PutWarm writes rec into the warm pool unless a record exists; it reports
// whether it wrote. Steps: (1) registered in its bucket if it was not;
// (2) record written if absent; (3) indexed warm; (4) as PutActive's (3).
func (s *Store) PutWarm(ctx context.Context, rec state.Record, now time.Time) (bool, error) {
	sid := rec.SandboxID
	if wrote, err := s.putAbsent(ctx, rec, state.StateWarm, now); err != nil || !wrote {
		return false, err
	}
	bc, err := s.index(ctx, sid, "warm", now, regValue(now, rec.Incarnation))
	if err != nil {
		return true, fmt.Errorf("index warm record: %w", err)
	}
	return true, s.commit(ctx, sid, rec.User, "", "hold", bc, prewarmEntry{})
}

// putAbsent registers rec in its bucket if it was not, then writes its
// record in state unless one exists: the first two steps of PutWarm and
// PutPrewarm. A crash between them leaves a registry entry Repair drops.
func (s *Store) putAbsent(ctx context.Context, rec state.Record, st state.State, now time.Time) (bool, error) {
	sid := rec.SandboxID
	if err := s.move(ctx, sid, "register", now, "nx"+regValue(now, rec.Incarnation)); err != nil {
		return false, fmt.Errorf("write %s record: %w", st, err)
	}
	args := append([]any{"absent", string(st), rec.Incarnation}, fields(rec, now)...)
	n, err := scriptRecPut.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("write %s record: %w", st, err)
	}
	return n == 1, nil
}

// Activate moves the warm sandbox sid back to active if it is still the
// incarnation the caller checked: (1) record, then (2) index. A crash
// between leaves an active record in the warm index: the reaper's claim
// (which wants a warm record) refuses it and Repair re-indexes it.
func (s *Store) Activate(ctx context.Context, sid, incarnation string, now time.Time) (bool, error) {
	n, err := scriptRecMove.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, string(state.StateWarm), string(state.StateActive),
		incarnation, "", "", ms(now)).Int()
	if err != nil || n != 1 {
		if err != nil {
			err = fmt.Errorf("activate warm sandbox: %w", err)
		}
		return false, err
	}
	if err := s.step("activate", 1); err != nil {
		return false, err
	}
	if err := s.move(ctx, sid, "active", now, ""); err != nil {
		return false, fmt.Errorf("activate warm sandbox: %w", err)
	}
	return true, nil
}

// Release parks sid, the sandbox of (user, thread), in the warm pool; false
// when there is no record, ErrIdentity when the record is not (user, thread)'s.
// Steps as Activate's.
func (s *Store) Release(ctx context.Context, sid, user, thread string, now time.Time) (bool, error) {
	n, err := scriptRecMove.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, string(state.StateActive), string(state.StateWarm),
		"", user, thread, "").Int()
	if err != nil {
		return false, fmt.Errorf("release sandbox: %w", err)
	}
	if n < 0 {
		return false, state.ErrIdentity
	}
	if n == 0 {
		return false, nil
	}
	if err := s.step("release", 1); err != nil {
		return false, err
	}
	if err := s.move(ctx, sid, "warm", now, ""); err != nil {
		return false, fmt.Errorf("release sandbox: %w", err)
	}
	return true, nil
}

// Claim marks sid as being destroyed and returns its record, or ok=false
// when another replica claimed it first or the incarnation ("" = any)
// differs. Steps: (1) record claimed; (2) out of its bucket's indexes and
// the pre-started index (a crash leaves it there: the reaper's claim
// refuses a record being destroyed, Repair and Forget take it out).
func (s *Store) Claim(ctx context.Context, sid, incarnation string) (state.Record, bool, error) {
	rec, ok, _, err := s.claimRecord(ctx, sid, incarnation, "")
	if err != nil || !ok {
		return rec, ok, err
	}
	if err := s.step("claim", 1); err != nil {
		return state.Record{}, false, err
	}
	return rec, true, s.unindex(ctx, sid, rec)
}

// take are the KEYS of scriptTake for bucket b's index i: the index, and
// the bucket's seq (the pre-started index is the fleet's and has none).
func (k Keys) take(b int, i state.Index) []string {
	switch i {
	case state.IndexActive:
		return []string{k.Active(b), k.buckets[b].seq}
	case state.IndexWarm:
		return []string{k.Warm(b), k.buckets[b].seq}
	}
	return []string{k.Prewarm()}
}

// ClaimExpired claims sid only if its score in index is at or below
// cutoff (now is the caller's clock): the reaper's and eviction's exactly-once gate. Steps: (1) taken
// out of the index if expired there; (2) the record claimed if it is in
// that index's state. A record in another state (a crash between the steps
// of Activate or Release, or a request racing the reaper) is indexed again
// where its state says; a crash between (1) and (2) leaves a record out of
// its index, which Repair indexes again (with activity now: a sandbox is
// never reaped early).
func (s *Store) ClaimExpired(ctx context.Context, sid string, index state.Index, cutoff, now time.Time) (state.Record, bool, error) {
	err := scriptTake.Run(ctx, s.rdb, s.keys.take(s.keys.Bucket(sid), index), sid, ms(cutoff)).Err()
	if errors.Is(err, redis.Nil) {
		return state.Record{}, false, nil
	}
	if err != nil {
		return state.Record{}, false, fmt.Errorf("claim expired sandbox: %w", err)
	}
	if err := s.step("claim_expired", 1); err != nil {
		return state.Record{}, false, err
	}
	rec, ok, st, err := s.claimRecord(ctx, sid, "", index.State())
	if err != nil {
		return state.Record{}, false, err
	}
	if ok {
		// Already out of its index; its user and the fleet count it until
		// Forget, which the destroy runs next (or the reconciler, which
		// finishes a destroy that failed).
		return rec, true, nil
	}
	if st.State != "" && st.State != state.StateDestroying {
		// Not what the index said: back where its record says.
		return state.Record{}, false, s.reindex(ctx, st, now)
	}
	return state.Record{}, false, nil
}

// claimRecord runs scriptRecClaim; on refusal st holds the record's state
// and incarnation (empty: no record).
func (s *Store) claimRecord(ctx context.Context, sid, incarnation string, want state.State) (state.Record, bool, state.Record, error) {
	res, err := scriptRecClaim.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, incarnation, string(want)).Slice()
	if errors.Is(err, redis.Nil) {
		return state.Record{}, false, state.Record{}, nil
	}
	if err != nil {
		return state.Record{}, false, state.Record{}, fmt.Errorf("claim sandbox: %w", err)
	}
	if len(res) == 2 {
		st, _ := res[0].(string)
		inc, _ := res[1].(string)
		return state.Record{}, false, state.Record{SandboxID: sid, State: state.State(st), Incarnation: inc}, nil
	}
	rec, ok := recordFromPairs(sid, res)
	return rec, ok, state.Record{}, nil
}

// unindex takes a claimed sandbox out of its bucket's indexes (it stays
// registered until its record is deleted), out of the pre-started index and
// out of its user's count: capacity frees up when a destroy is decided.
func (s *Store) unindex(ctx context.Context, sid string, rec state.Record) error {
	bc, err := s.index(ctx, sid, "none", time.Time{}, "")
	if err != nil {
		return err
	}
	return s.commit(ctx, sid, rec.User, "", "leave", bc, prewarmEntry{})
}

// Forget deletes sid's record if it still names incarnation ("" = any).
// Steps: (1) record deleted; (2) out of its bucket (registry and indexes);
// (3) as PutActive's (3), the user letting go. A crash after (1) leaves a
// registry entry without a record, which Repair drops; after (2), a held
// user member without a record, which the user's next refusal prunes, and
// the bucket's count behind until its next change or sync.
func (s *Store) Forget(ctx context.Context, sid, incarnation string) (bool, error) {
	rec, ok, err := s.deleteRecord(ctx, sid, incarnation, "")
	if err != nil || !ok {
		return false, err
	}
	if err := s.step("forget", 1); err != nil {
		return false, err
	}
	bc, err := s.index(ctx, sid, "drop", time.Time{}, "")
	if err != nil {
		return false, fmt.Errorf("forget sandbox: %w", err)
	}
	if err := s.step("forget", 2); err != nil {
		return false, err
	}
	return true, s.commit(ctx, sid, rec.User, capSum(rec), "leave", bc, prewarmEntry{})
}

// capSum is the index key of rec's capability ("" = none): the store
// writes a capability and its sum together.
func capSum(rec state.Record) string {
	if rec.Capability == "" {
		return ""
	}
	return state.SumCapability(rec.Capability).Hex()
}

// deleteRecord runs scriptRecDelete.
func (s *Store) deleteRecord(ctx context.Context, sid, incarnation string, want state.State) (state.Record, bool, error) {
	res, err := scriptRecDelete.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, incarnation, string(want)).Slice()
	if errors.Is(err, redis.Nil) {
		return state.Record{}, false, nil
	}
	if err != nil {
		return state.Record{}, false, fmt.Errorf("delete record: %w", err)
	}
	rec, ok := recordFromPairs(sid, res)
	return rec, ok, nil
}

// Touch refreshes the activity of entries, one script per bucket in one
// round trip per node, and returns the indexes of entries that are no
// longer active with that incarnation.
func (s *Store) Touch(ctx context.Context, entries []state.TouchEntry, now time.Time) ([]int, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	byBucket := map[int][]int{}
	for i, e := range entries {
		b := s.keys.Bucket(e.SandboxID)
		byBucket[b] = append(byBucket[b], i)
	}
	calls := make([]*call, 0, len(byBucket))
	order := make([][]int, 0, len(byBucket))
	for b, idx := range byBucket {
		args := make([]any, 0, 2*len(idx)+1)
		args = append(args, ms(now))
		for _, i := range idx {
			args = append(args, entries[i].SandboxID, entries[i].Incarnation)
		}
		calls = append(calls, &call{script: scriptTouch, keys: []string{s.keys.Reg(b), s.keys.Active(b)}, args: args})
		order = append(order, idx)
	}
	if err := s.batch(ctx, calls, nil); err != nil {
		return nil, fmt.Errorf("touch sandboxes: %w", err)
	}
	var stale []int
	for c, cl := range calls {
		raw, err := cl.cmd.Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("touch sandboxes: %w", err)
		}
		for _, v := range raw {
			stale = append(stale, order[c][v-1])
		}
	}
	slices.Sort(stale)
	return stale, nil
}

// Expired returns up to limit sandboxes of bucket b's index scored at or
// below cutoff, oldest first. Cost is O(log n + limit): the reaper never
// scans the pool.
func (s *Store) Expired(ctx context.Context, b int, index state.Index, cutoff time.Time, limit int64) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.keys.take(b, index)[0], &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(ms(cutoff), 10), Count: limit,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("list expired: %w", err)
	}
	return ids, nil
}

// Due returns the active and warm indexes of buckets that hold a sandbox
// scored at or below cutoff: one ZCOUNT each, one round trip per node, so
// a reaper pass with nothing expired costs no more than that.
func (s *Store) Due(ctx context.Context, buckets []int, cutoff time.Time) ([]state.Due, error) {
	pipe := s.rdb.Pipeline()
	upTo := strconv.FormatInt(ms(cutoff), 10)
	cmds := make([]*redis.IntCmd, 0, 2*len(buckets))
	for _, b := range buckets {
		cmds = append(cmds, pipe.ZCount(ctx, s.keys.Active(b), "-inf", upTo), pipe.ZCount(ctx, s.keys.Warm(b), "-inf", upTo))
	}
	if len(buckets) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("count expired: %w", err)
		}
	}
	var due []state.Due
	for i, c := range cmds {
		if c.Val() > 0 {
			due = append(due, state.Due{Bucket: buckets[i/2], Index: state.Index(i % 2)})
		}
	}
	return due, nil
}

// Count returns the pool sizes: one round trip per node.
func (s *Store) Count(ctx context.Context) (state.Counts, error) {
	pipe := s.rdb.Pipeline()
	n := s.keys.Buckets()
	a, w := make([]*redis.IntCmd, n), make([]*redis.IntCmd, n)
	for b := range n {
		a[b] = pipe.ZCard(ctx, s.keys.Active(b))
		w[b] = pipe.ZCard(ctx, s.keys.Warm(b))
	}
	c := pipe.ZCard(ctx, s.keys.Creating())
	pw := pipe.ZCard(ctx, s.keys.Prewarm())
	if _, err := pipe.Exec(ctx); err != nil {
		return state.Counts{}, fmt.Errorf("count pool: %w", err)
	}
	out := state.Counts{Creating: c.Val(), Prewarm: pw.Val()}
	for b := range n {
		out.Active += a[b].Val()
		out.Warm += w[b].Val()
	}
	return out, nil
}

// BucketRecords returns the records registered in buckets.
func (s *Store) BucketRecords(ctx context.Context, buckets []int) ([]state.Record, error) {
	pipe := s.rdb.Pipeline()
	regs := make([]*redis.StringSliceCmd, len(buckets))
	for i, b := range buckets {
		regs[i] = pipe.HKeys(ctx, s.keys.Reg(b))
	}
	if len(buckets) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read registries: %w", err)
		}
	}
	var ids []string
	for _, r := range regs {
		ids = append(ids, r.Val()...)
	}
	return s.records(ctx, ids)
}

// List returns every record in the active and warm indexes (threads'
// sandboxes: the prewarm pool's are PrewarmRecords).
func (s *Store) List(ctx context.Context) ([]state.Record, error) {
	pipe := s.rdb.Pipeline()
	n := s.keys.Buckets()
	cmds := make([]*redis.StringSliceCmd, 0, 2*n)
	for b := range n {
		cmds = append(cmds, pipe.ZRange(ctx, s.keys.Active(b), 0, -1), pipe.ZRange(ctx, s.keys.Warm(b), 0, -1))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("list pool: %w", err)
	}
	var ids []string
	for _, c := range cmds {
		ids = append(ids, c.Val()...)
	}
	return s.records(ctx, ids)
}

func (s *Store) records(ctx context.Context, ids []string) ([]state.Record, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, sid := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.keys.Sandbox(sid))
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read pool records: %w", err)
		}
	}
	out := make([]state.Record, 0, len(ids))
	for i, sid := range ids {
		if rec, ok := recordFromHash(sid, cmds[i].Val()); ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// call is one script call of a batch.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// batch runs calls (and extra's plain commands) in one pipeline: one round
// trip per node. Scripts go by SHA; a node that does not have one yet (a
// restart, a failover) answers NOSCRIPT, and the batch, whose steps are all
// idempotent, is run again with the scripts loaded.
func (s *Store) batch(ctx context.Context, calls []*call, extra func(redis.Pipeliner)) error {
	for attempt := 0; ; attempt++ {
		pipe := s.rdb.Pipeline()
		for _, c := range calls {
			if attempt == 0 {
				c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			} else {
				c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
			}
		}
		if extra != nil {
			extra(pipe)
		}
		_, err := pipe.Exec(ctx)
		if err == nil || errors.Is(err, redis.Nil) {
			return nil
		}
		if attempt == 0 && noScript(calls) {
			continue
		}
		return err
	}
}

func noScript(calls []*call) bool {
	for _, c := range calls {
		if c.cmd.Err() != nil && redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

func ms(t time.Time) int64 { return t.UnixMilli() }
