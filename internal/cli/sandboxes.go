package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// filters are ls's and top's selection, sent as query parameters.
type filters struct{ user, thread, state, backend string }

func (f *filters) bind(fs *cmdFlags) {
	fs.StringVar(&f.user, "user", "", "only this user's sandboxes")
	fs.StringVar(&f.thread, "thread", "", "only this thread's sandboxes")
	fs.StringVar(&f.state, "state", "", "only sandboxes in this state: active | frozen | warm")
	fs.StringVar(&f.backend, "backend", "", "only sandboxes of this backend")
}

func (f filters) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"user": f.user, "thread": f.thread, "state": f.state, "backend": f.backend} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func runList(ctx context.Context, env Env, args []string) error {
	var c common
	var f filters
	fs := newFlags(env, "sandboxes ls", "sandboxes ls [--user U] [--thread T] [--state active|frozen|warm] [--backend B] [-o json]", &c)
	f.bind(fs)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("sandboxes ls takes no arguments (got %q)", pos[0])
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	var list api.AdminSandboxList
	if err := cl.call(ctx, "GET", "/admin/v1/sandboxes", f.query(), &list); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, list)
	}
	t := newTable(env.Stdout, "SANDBOX ID", "USER", "THREAD", "BACKEND", "TEMPLATE", "STATE", "AGE")
	now := time.Now()
	for _, s := range list.Sandboxes {
		t.row(s.SandboxID, s.User, s.Thread, s.Backend, orDash(s.Template), s.State, age(s.CreatedAt, now))
	}
	return t.flush()
}

// eachID runs fn for every id, going on past failures (docker rm does);
// the error names how many failed.
func eachID(env Env, ids []string, fn func(id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := fn(id); err != nil {
			fmt.Fprintf(env.Stderr, "gateway: %s: %s\n", id, err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d failed", failed, len(ids))
	}
	return nil
}

func runInspect(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newFlags(env, "sandboxes inspect", "sandboxes inspect [-o json] ID...", &c)
	ids, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("sandboxes inspect: want at least one sandbox id")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	var all []api.AdminSandbox
	err = eachID(env, ids, func(id string) error {
		var s api.AdminSandbox
		if err := cl.call(ctx, "GET", "/admin/v1/sandboxes/"+url.PathEscape(id), nil, &s); err != nil {
			return err
		}
		all = append(all, s)
		return nil
	})
	if c.output == "json" {
		if all == nil {
			all = []api.AdminSandbox{}
		}
		return errors.Join(writeJSON(env.Stdout, all), err)
	}
	for i, s := range all {
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		t := newTable(env.Stdout, "Sandbox ID:", s.SandboxID)
		t.row("User:", s.User)
		t.row("Thread:", s.Thread)
		t.row("Backend:", s.Backend)
		t.row("Template:", orDash(s.Template))
		t.row("State:", s.State)
		t.row("Created:", s.CreatedAt.Format(time.RFC3339)+" ("+age(s.CreatedAt, time.Now())+" ago)")
		if s.Alive != nil {
			t.row("Alive:", strconv.FormatBool(*s.Alive))
		}
		if s.Data != nil {
			t.row("Thread data:", bytesIEC(s.Data.Bytes))
		}
		if ferr := t.flush(); ferr != nil {
			return ferr
		}
	}
	return err
}

func runDestroy(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newFlags(env, "sandboxes destroy", "sandboxes destroy ID...   (the thread's data stays; see threads rm)", &c)
	ids, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("sandboxes destroy: want at least one sandbox id")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	return deleteEach(ctx, env, cl, c.output, ids,
		func(id string) string { return "/admin/v1/sandboxes/" + url.PathEscape(id) },
		func(id string, _ api.AdminDestroyed) string { return id }) // docker rm prints what it removed
}

// deleteEach DELETEs path(id) for every id, going on past failures: a
// line per success in a table, or the answers as one JSON array.
func deleteEach[Answer any](ctx context.Context, env Env, cl *client, output string, ids []string,
	path func(id string) string, line func(id string, out Answer) string) error {
	done := []Answer{}
	err := eachID(env, ids, func(id string) error {
		var out Answer
		if err := cl.call(ctx, "DELETE", path(id), nil, &out); err != nil {
			return err
		}
		done = append(done, out)
		if output == "table" {
			fmt.Fprintln(env.Stdout, line(id, out))
		}
		return nil
	})
	if output == "json" {
		return errors.Join(writeJSON(env.Stdout, done), err)
	}
	return err
}

func runLogs(ctx context.Context, env Env, args []string) error {
	var c common
	var follow bool
	var tail int
	fs := newFlags(env, "sandboxes logs", "sandboxes logs [-f] [--tail N] ID", &c)
	fs.BoolVar(&follow, "f", false, "follow: stream new lines until interrupted or the sandbox stops")
	fs.BoolVar(&follow, "follow", false, "same as -f")
	fs.IntVar(&tail, "tail", 0, "start with the last N lines (0 = all)")
	ids, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return usagef("sandboxes logs: want exactly one sandbox id")
	}
	if tail < 0 {
		return usagef("--tail must not be negative")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	if tail > 0 {
		q.Set("tail", strconv.Itoa(tail))
	}
	resp, cancel, err := cl.do(ctx, "GET", "/admin/v1/sandboxes/"+url.PathEscape(ids[0])+"/logs", q, nil, true)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	_, err = io.Copy(env.Stdout, resp.Body)
	if err != nil && ctx.Err() != nil {
		return nil // interrupted: how -f ends
	}
	return err
}
