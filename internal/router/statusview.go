package router

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/router/status"
	"github.com/sandgate/sandgate/internal/state"
)

// How many recent events the page shows, and how many of them are errors.
const (
	statusEvents = 100
	statusErrors = 20
)

// statusView is what the templates render. It holds no URL, secret,
// capability or host path: only names, states and times.
type statusView struct {
	User          string
	Admin, Logout bool
	Sandboxes     []sandboxRow
	ByState       []stateCount
	Users         []userCount
	Total         int
	Max, PerUser  int
	HardCap       bool
	Alive         int
	Replicas      []replicaRow
	Events        []events.Event
	Errors        []events.Event
	// Token is the form token of the page's actions (the script's); Done
	// the action just done (a form's redirect says it).
	Token, Done string
}

type sandboxRow struct {
	State, Backend, User, Thread, SandboxID string
	// Template is the template it was made from, "—" for none.
	Template string
	// Age is since creation; Last is the last activity (active), the
	// release (warm), the create's deadline (creating).
	Age, Last string
	// Actions are the page's actions on it (statusaction.go).
	Actions []string
}

type stateCount struct {
	State, Backend string
	N              int
}

type userCount struct {
	User                                  string
	Active, Frozen, Warm, Creating, Total int
}

type replicaRow struct {
	Instance, Seen string
	Alive          bool
}

// view reads what p may see; withEvents adds the recent events (the full
// page; the re-fetched fragment leaves the live list to the script).
func (s *statusPage) view(ctx context.Context, p *auth.Principal, withEvents bool) (*statusView, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	now := time.Now()
	ov, err := s.cfg.Source.Overview(ctx, now)
	if err != nil {
		return nil, stateErr(err)
	}
	reps, err := s.cfg.Source.Replicas(ctx)
	if err != nil {
		return nil, stateErr(err)
	}
	admin := p.Has(auth.ScopeAdmin)
	v := &statusView{User: p.User, Admin: admin, Logout: s.rt.auth != nil,
		Max: s.cfg.MaxSandboxes, PerUser: s.cfg.MaxSandboxesPerUser, HardCap: s.cfg.HardCap}
	users := map[string]*userCount{}
	states := map[[2]string]int{}
	add := func(list []state.Entry, state string) {
		for _, e := range list {
			if !mayManage(p, e.User, e.Thread) {
				continue
			}
			row := rowOf(e.Record, now) // a frozen active one shows "frozen"
			row.Last = status.Ago(now.Sub(e.Since))
			if state == "creating" {
				row.Backend, row.Last = "—", "—"
			}
			row.Actions = s.actionsFor(row.State)
			v.Sandboxes = append(v.Sandboxes, row)
			states[[2]string{row.State, row.Backend}]++
			u := users[e.User]
			if u == nil {
				u = &userCount{User: e.User}
				users[e.User] = u
			}
			switch row.State {
			case "active":
				u.Active++
			case "frozen":
				u.Frozen++
			case "warm":
				u.Warm++
			default:
				u.Creating++
			}
			u.Total++
		}
	}
	add(ov.Active, string(state.StateActive))
	add(ov.Warm, string(state.StateWarm))
	add(ov.Creating, "creating")
	// The fleet's total is everyone's business: it says whether a create fits.
	v.Total = len(ov.Active) + len(ov.Warm) + len(ov.Creating)
	slices.SortStableFunc(v.Sandboxes, func(a, b sandboxRow) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Backend, b.Backend),
			cmp.Compare(a.User, b.User), cmp.Compare(a.Thread, b.Thread), cmp.Compare(a.SandboxID, b.SandboxID))
	})
	for k, n := range states {
		v.ByState = append(v.ByState, stateCount{State: k[0], Backend: k[1], N: n})
	}
	slices.SortFunc(v.ByState, func(a, b stateCount) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Backend, b.Backend))
	})
	for _, u := range users {
		v.Users = append(v.Users, *u)
	}
	slices.SortFunc(v.Users, func(a, b userCount) int { return cmp.Compare(a.User, b.User) })

	beat := cmp.Or(s.cfg.Heartbeat, pool.HeartbeatInterval)
	for _, r := range reps {
		alive := now.Sub(r.Seen) <= 3*beat
		if alive {
			v.Alive++
		}
		if admin {
			v.Replicas = append(v.Replicas, replicaRow{Instance: r.Instance, Seen: status.Ago(now.Sub(r.Seen)), Alive: alive})
		}
	}

	if s.bus != nil {
		recent, err := s.bus.Recent(ctx, 0)
		if err != nil {
			return nil, stateErr(err)
		}
		for _, e := range recent {
			if !visible(p, e) {
				continue
			}
			if withEvents && len(v.Events) < statusEvents {
				v.Events = append(v.Events, e)
			}
			if isError(e) && len(v.Errors) < statusErrors {
				v.Errors = append(v.Errors, e)
			}
		}
	}
	return v, nil
}

// isError: a failed create, or a destroy nobody chose: a crashed
// replica's destroy finished (interrupted), a sandbox found dead or gone
// (vanished), a server that stopped answering (failed_health), or any
// reason this list does not know. A destroy someone or a policy chose
// (idle, eviction, a user's quota, max_lifetime, changed options, a
// client's, the provisioner API's, an operator's from the CLI or this
// page, a pre-started one trimmed) is routine, and a freeze publishes no
// destroy at all.
func isError(e events.Event) bool {
	switch e.Type {
	case events.Failed:
		return true
	case events.Destroyed:
		switch pool.DestroyReason(e.Cause) {
		case "", pool.ReasonIdle, pool.ReasonEvicted, pool.ReasonClient, pool.ReasonProvisioner, pool.ReasonAdmin,
			pool.ReasonPrewarmTrim, pool.ReasonMaxLifetime, pool.ReasonOptions, pool.ReasonQuota:
			return false
		}
		return true
	}
	return false
}
