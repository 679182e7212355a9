package events

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrBadPosition is a resume point that is neither a stream id nor an
// RFC 3339 time.
var ErrBadPosition = errors.New("events: not an event id or an RFC 3339 time")

// Position is where a reader resumes: it gets the events after it, in
// stream order. The zero Position is before every event.
type Position struct{ ms, seq uint64 }

// After is the position just after the event with this id.
func After(id string) (Position, error) {
	msPart, seqPart, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(msPart, 10, 64)
	seq, err2 := strconv.ParseUint(seqPart, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Position{}, ErrBadPosition
	}
	return Position{ms, seq}, nil
}

// Since is the position just before the first event at or after t.
func Since(t time.Time) Position {
	ms := t.UnixMilli()
	if ms <= 0 {
		return Position{}
	}
	return Position{uint64(ms) - 1, math.MaxUint64}
}

// ParsePosition reads a client's resume point: an event id (Last-Event-ID,
// ?since=1733500000000-0) or an RFC 3339 time (?since=2026-12-06T10:00:00Z).
func ParsePosition(s string) (Position, error) {
	if p, err := After(s); err == nil {
		return p, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Position{}, ErrBadPosition
	}
	return Since(t), nil
}

func (p Position) String() string { return fmt.Sprintf("%d-%d", p.ms, p.seq) }

// before reports whether p is before q in stream order.
func (p Position) before(q Position) bool {
	return p.ms < q.ms || p.ms == q.ms && p.seq < q.seq
}
