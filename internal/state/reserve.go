package state

import "time"

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
	// Kind is "" (a create), KindTake or KindPrewarm (see scriptFleetReserve).
	Kind string
	// Prewarm, with KindTake, is the fingerprint of the spec the thread's
	// sandbox needs (its template's): only a pre-started sandbox made from
	// it is offered, the oldest. "" (a replica of an earlier version) takes
	// the oldest of any.
	Prewarm string
	// Spread, with KindTake, is 0 on a first try: the oldest is offered.
	// A retry after another replica or request took the offered one sets a
	// random one, and is offered the matching pre-started sandbox at Spread
	// modulo their number: claims arriving together spread over the pool.
	Spread uint32
}

// Kinds of ReserveRequest. KindTake is a thread's create that may take a
// pre-started sandbox instead; its wire value stays "claim", the word
// replicas of earlier versions send to the same script.
const (
	KindTake    = "claim"
	KindPrewarm = "prewarm"
)

// ReserveResult is the outcome of Reserve.
type ReserveResult struct {
	Outcome string // "ok", "prewarm", "evict", "over", "full", "user_max", "user_creates", "share"
	Victim  string // with "evict": the sandbox to destroy; with "prewarm": the one to take
	// Held is the user's count with "user_max" and "user_creates", its fair
	// share with "share".
	Held int
	// Quota: with "evict", the victim is the user's own warm sandbox,
	// evicted because the user is at a quota (max_sandboxes_per_user, or
	// its fair share of a full hard cap), not for the fleet's room.
	Quota bool
}
