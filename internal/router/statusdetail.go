package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/router/status"
	"github.com/sandgate/sandgate/internal/state"
)

// One sandbox's page, GET /status/sandboxes/{id}: its record, resource use
// (the backend's sample, as `gateway sandboxes top` shows it), the last
// commands that ended in it (its server's command log, newest first), its
// recent events and the actions (statusaction.go). ?part=live is the part the
// script re-fetches after an action or an event.

// detailView is what the "detail" template renders.
type detailView struct {
	User          string
	Admin, Logout bool
	// Found is false once the sandbox is gone (or was never p's).
	Found   bool
	ID      string
	Sandbox sandboxRow
	// FrozenFor is how long it has been frozen; "" when it runs.
	FrozenFor string
	// CPU, Memory and PIDs are the backend's sample; StatsNote says why
	// there is none.
	CPU, Memory, PIDs, StatsNote string
	// Charts are CPU % and memory over the sampler's short history.
	Charts []chart
	// Data, Layer and Egress are the sampler's latest disk and egress
	// figures ("" = none measured).
	Data, Layer, Egress string
	// Commands are the last statusCommands that ended, newest first;
	// CommandsNote says why there are none to show.
	Commands     []commandRow
	CommandsNote string
	Events       []events.Event
	Token        string
	Done         string
}

// doneOf is q if it is an action's Done word: the page repeats no other
// ?done= text.
func doneOf(q string) string {
	for _, a := range statusActions {
		if a.Done == q {
			return q
		}
	}
	return ""
}

// rowOf is rec as a row of the sandboxes table, without its last activity.
func rowOf(rec state.Record, now time.Time) sandboxRow {
	row := sandboxRow{State: string(rec.Shown()), Backend: rec.Backend, User: rec.User, Thread: rec.Thread,
		SandboxID: rec.SandboxID, Template: cmp.Or(rec.Template, "—")}
	if !rec.CreatedAt.IsZero() && rec.CreatedAt.Unix() > 0 {
		row.Age = status.Ago(now.Sub(rec.CreatedAt))
	}
	return row
}

// detail is GET /status/sandboxes/{id}.
func (s *statusPage) detail(c echo.Context) error {
	p, err := s.principal(c.Request())
	if err != nil {
		if c.QueryParam("part") == "" && errors.Is(err, auth.ErrUnauthenticated) {
			return c.Redirect(http.StatusSeeOther, "/status/login")
		}
		return err
	}
	sid := c.Param("id")
	if !identity.ValidSandboxID(sid) {
		return errBadSandboxID
	}
	v, err := s.detailOf(c.Request().Context(), p, sid)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if !v.Found {
		code = http.StatusNotFound // an HTML page all the same: the script shows it
	}
	if c.QueryParam("part") == "live" {
		return s.render(c, code, "sandbox", v)
	}
	if id, ok := s.formID(c); ok {
		v.Token = formToken(id)
	}
	v.Done = doneOf(c.QueryParam("done"))
	return s.render(c, code, "detail", v)
}

// detailOf reads sid's sandbox as p may see it.
func (s *statusPage) detailOf(ctx context.Context, p *auth.Principal, sid string) (*detailView, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	now := time.Now()
	v := &detailView{User: p.User, Admin: p.Has(auth.ScopeAdmin), Logout: s.rt.auth != nil, ID: sid}
	// The overview, not the record alone: its index score is the last activity.
	ov, err := s.cfg.Source.Overview(ctx, now)
	if err != nil {
		return nil, stateErr(err)
	}
	var info backend.Info
	active := false
	for _, e := range append(ov.Active, ov.Warm...) {
		if e.SandboxID != sid || !mayManage(p, e.User, e.Thread) {
			continue
		}
		v.Found = true
		info, active = e.Record.Info(), e.State == state.StateActive
		v.Sandbox = rowOf(e.Record, now)
		v.Sandbox.Last = status.Ago(now.Sub(e.Since))
		v.Sandbox.Actions = s.actionsFor(v.Sandbox.State)
		if !e.Frozen.IsZero() {
			v.FrozenFor = status.Ago(now.Sub(e.Frozen))
		}
	}
	if !v.Found {
		return v, nil
	}
	s.sample(ctx, v)
	if active && v.FrozenFor == "" { // a warm or frozen sandbox has no history worth drawing
		s.charts(ctx, v, info)
	}
	s.commands(ctx, v)
	if s.bus != nil {
		recent, err := s.bus.Recent(ctx, 0)
		if err != nil {
			return nil, stateErr(err)
		}
		for _, e := range recent {
			if e.SandboxID == sid && visible(p, e) && len(v.Events) < statusErrors {
				v.Events = append(v.Events, e)
			}
		}
	}
	return v, nil
}

// sample fills v's resource use from the backend (the admin API's stats).
func (s *statusPage) sample(ctx context.Context, v *detailView) {
	if s.rt.admin == nil || !s.rt.admin.CanStat() {
		v.StatsNote = "this backend cannot measure its sandboxes"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	st, err := s.rt.admin.Stats(ctx, v.ID)
	if err != nil {
		s.rt.log.DebugContext(ctx, "sandbox stats", "sandbox_id", v.ID, "err", err)
		v.StatsNote = "no figures: " + statusOf(err).message
		return
	}
	v.CPU = fmt.Sprintf("%.2f s", st.CPUSeconds)
	v.Memory = fmt.Sprintf("%.1f MiB", float64(st.MemoryBytes)/(1<<20))
	v.PIDs = fmt.Sprint(st.PIDs)
}

// statusCommands is how many commands the detail page lists.
const statusCommands = 20

// commandRow is one ended command as the detail page shows it.
type commandRow struct {
	Ended, Who, Command, Status, Duration, Output string
	ExitCode                                      int
	Failed                                        bool
}

// commands fills v's recent commands from the sandbox's server. A frozen
// sandbox is not asked: its server is stopped with it (or must not be
// woken for a page view).
func (s *statusPage) commands(ctx context.Context, v *detailView) {
	if s.rt.admin == nil {
		v.CommandsNote = "this gateway has no operator API"
		return
	}
	if v.FrozenFor != "" {
		v.CommandsNote = "frozen: not asked"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	log, err := s.rt.admin.Commands(ctx, v.ID, statusCommands)
	if err != nil {
		s.rt.log.DebugContext(ctx, "sandbox commands", "sandbox_id", v.ID, "err", err)
		v.CommandsNote = "no record: " + statusOf(err).message
		return
	}
	now := time.Now()
	for i := len(log.Records) - 1; i >= 0; i-- {
		rec := log.Records[i]
		ended := rec.StartedAt.Add(time.Duration(rec.DurationMS) * time.Millisecond)
		row := commandRow{Ended: status.Ago(now.Sub(ended)), Who: cmp.Or(rec.Who, "—"), Command: rec.Command,
			Status: rec.Status, ExitCode: rec.ExitCode, Failed: rec.ExitCode != 0,
			Duration: (time.Duration(rec.DurationMS) * time.Millisecond).String(), Output: fmt.Sprintf("%d B", rec.OutputBytes)}
		if rec.CommandBytes > len(rec.Command) {
			row.Command += fmt.Sprintf(" … (%d bytes)", rec.CommandBytes)
		}
		v.Commands = append(v.Commands, row)
	}
	if len(v.Commands) == 0 {
		v.CommandsNote = "none has ended yet"
	}
}
