package statedb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// What a replica dying between the steps of a change leaves behind, and
// how the reconciler of the bucket (Store.Inconsistent, then Store.Repair
// under the sandbox's lock) puts it right:
//
//	registry entry, no record       a create died before its record, or a
//	                                destroy after deleting it: dropped (after
//	                                the grace, so a create's is not)
//	record, wrong or no index entry its index follows the record (activity
//	                                now: never reaped early)
//	pre-started record, not indexed back into the fleet's pre-started index,
//	or not its fingerprint          with the record's fingerprint (an earlier
//	                                version indexed none)
//	record, its user lost it        the user holds it again
//	bucket count behind the fleet   reported again (SyncCounts)

// Inconsistent returns the sandboxes of buckets whose bucket entries, user
// membership or pre-started index entry (and fingerprint) disagree with
// their records (or that are registered without a record for longer than
// grace): three pipelined reads, each one round trip per node. O(buckets' sandboxes).
func (s *Store) Inconsistent(ctx context.Context, buckets []int, now time.Time, grace time.Duration) ([]string, error) {
	pipe := s.rdb.Pipeline()
	regs := make([]*redis.MapStringStringCmd, len(buckets))
	acts, warms := make([]*redis.StringSliceCmd, len(buckets)), make([]*redis.StringSliceCmd, len(buckets))
	for i, b := range buckets {
		regs[i] = pipe.HGetAll(ctx, s.keys.Reg(b))
		acts[i] = pipe.ZRange(ctx, s.keys.Active(b), 0, -1)
		warms[i] = pipe.ZRange(ctx, s.keys.Warm(b), 0, -1)
	}
	if len(buckets) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read buckets: %w", err)
	}
	reg := map[string]string{}
	in := map[string]state.State{}
	var bad []string
	for i := range buckets {
		for sid, v := range regs[i].Val() {
			reg[sid] = v
		}
		for _, sid := range acts[i].Val() {
			in[sid] = state.StateActive
		}
		for _, sid := range warms[i].Val() {
			if _, dup := in[sid]; dup {
				bad = append(bad, sid) // in both
			}
			in[sid] = state.StateWarm
		}
	}
	for sid := range in {
		if _, ok := reg[sid]; !ok {
			bad = append(bad, sid) // indexed, not registered
		}
	}
	ids := make([]string, 0, len(reg))
	for sid := range reg {
		ids = append(ids, sid)
	}
	pipe = s.rdb.Pipeline()
	recs := make([]*redis.SliceCmd, len(ids))
	for i, sid := range ids {
		recs[i] = pipe.HMGet(ctx, s.keys.Sandbox(sid), "state", "incarnation", "user", "prewarm")
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read buckets' records: %w", err)
		}
	}
	for i, sid := range ids {
		v := recs[i].Val()
		st, _ := v[0].(string)
		inc, _ := v[1].(string)
		at, regInc, _ := strings.Cut(reg[sid], "|")
		if st == "" {
			registered, _ := strconv.ParseInt(at, 10, 64)
			if now.Sub(time.UnixMilli(registered)) > grace {
				bad = append(bad, sid)
			}
			continue
		}
		want := state.State(st)
		if want != state.StateActive && want != state.StateWarm {
			want = ""
		}
		if in[sid] != want || regInc != inc {
			bad = append(bad, sid)
		}
	}
	// Consistent so far: the pre-started index entry and its fingerprint,
	// or the user's membership, one pipelined read each.
	pipe = s.rdb.Pipeline()
	type member struct {
		sid  string
		held bool // a user's (held score), else the pre-started index's
		cmd  *redis.FloatCmd
		fp   *redis.StringCmd // the indexed fingerprint of a pre-started one
		want string           // its record's
	}
	var checks []member
	for i, sid := range ids {
		v := recs[i].Val()
		st, _ := v[0].(string)
		user, _ := v[2].(string)
		switch {
		case state.State(st) == state.StatePrewarm:
			fp, _ := v[3].(string)
			checks = append(checks, member{sid, false, pipe.ZScore(ctx, s.keys.Prewarm(), sid), pipe.HGet(ctx, s.keys.PrewarmFP(), sid), fp})
		case user != "" && (state.State(st) == state.StateActive || state.State(st) == state.StateWarm):
			checks = append(checks, member{sid: sid, held: true, cmd: pipe.ZScore(ctx, s.keys.User(user), sid)})
		}
	}
	if len(checks) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read buckets' memberships: %w", err)
		}
	}
	for _, m := range checks {
		if m.cmd.Err() != nil || m.held && m.cmd.Val() < heldAt || m.fp != nil && m.fp.Val() != m.want {
			bad = append(bad, m.sid)
		}
	}
	return bad, nil
}

// Repair makes sid's bucket entries, its pre-started index entry and
// fingerprint and its user's membership follow its record, or drops them when it has none.
// Hold the sandbox's lock. It reports whether sid had a record.
func (s *Store) Repair(ctx context.Context, sid string, now time.Time) (bool, error) {
	rec, ok, err := s.Get(ctx, sid)
	if err != nil {
		return false, err
	}
	if !ok {
		bc, err := s.index(ctx, sid, "drop", now, "")
		if err != nil {
			return false, err
		}
		return false, s.commit(ctx, sid, "", "", "", bc, prewarmEntry{})
	}
	return true, s.reindex(ctx, rec, now)
}

// reindex puts rec's sandbox where its state says (scored at), registered
// with its incarnation, held by its user (not once being destroyed, as
// Claim leaves it), and reports the bucket's count (the fleet then holds no
// reservation for it: it is recorded).
func (s *Store) reindex(ctx context.Context, rec state.Record, at time.Time) error {
	st, pw, user, op := "none", prewarmEntry{}, rec.User, "leave"
	switch rec.State {
	case state.StateActive, state.StateWarm:
		st, op = string(rec.State), "hold"
	case state.StatePrewarm:
		pw = prewarmEntry{score: strconv.FormatInt(ms(rec.CreatedAt), 10), fp: rec.Prewarm}
	}
	bc, err := s.index(ctx, rec.SandboxID, st, at, regValue(at, rec.Incarnation))
	if err != nil {
		return err
	}
	return s.commit(ctx, rec.SandboxID, user, "", op, bc, pw)
}

// SyncCounts reports buckets' counts to the fleet (the reconciler's pass:
// a report a dying replica did not make is made here): one batch to the
// buckets, one to the fleet.
func (s *Store) SyncCounts(ctx context.Context, buckets []int) error {
	reads := make([]*call, len(buckets))
	for i, b := range buckets {
		reads[i] = &call{script: scriptIndex, keys: s.keys.bucketKeys(b), args: []any{"", "register", 0, "", "1"}}
	}
	if err := s.batch(ctx, reads, nil); err != nil {
		return fmt.Errorf("read bucket counts: %w", err)
	}
	reports := make([]*call, len(buckets))
	for i, b := range buckets {
		v, err := reads[i].cmd.Int64Slice()
		if err != nil {
			return fmt.Errorf("read bucket %d's count: %w", b, err)
		}
		reports[i] = &call{script: scriptFleetCommit, keys: s.keys.fleetKeys(), args: []any{"", b, v[0], v[1], "", "", "", ""}}
	}
	if err := s.batch(ctx, reports, nil); err != nil {
		return fmt.Errorf("report bucket counts: %w", err)
	}
	return nil
}
