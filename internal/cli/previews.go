package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// The preview commands: links that open one port of a thread's sandbox to
// whoever holds them (POST, GET and DELETE /threads/{thread}/previews).
// A link's URL is a credential: it is printed to its owner, never logged.

func previewTable(env Env, list []api.Preview) error {
	t := newTable(env.Stdout, "ID", "PORT", "EXPIRES", "URL")
	now := time.Now()
	for _, p := range list {
		t.row(p.ID, strconv.Itoa(p.Port), "in "+p.ExpiresAt.Sub(now).Round(time.Second).String(), p.URL)
	}
	return t.flush()
}

func runPreviewCreate(ctx context.Context, env Env, args []string) error {
	var c common
	var port int
	var ttl string
	fs := newFlags(env, "preview create", "preview create THREAD --port P [--ttl 1h]   (a link to port P inside the thread's sandbox; no other credential needed)", &c)
	fs.IntVar(&port, "port", 0, "the port inside the sandbox (required)")
	fs.StringVar(&ttl, "ttl", "", "how long the link works, e.g. 30m, 2h (default 1h; at most the gateway's preview_max_ttl)")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("preview create: want exactly one thread id")
	}
	if port < 1 || port > 65535 {
		return usagef("preview create: --port 1-65535 is required")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var p api.Preview
	if err := cl.send(ctx, "POST", threadPath(pos[0])+"/previews", nil, api.CreatePreview{Port: port, TTL: ttl}, &p); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, p)
	}
	return previewTable(env, []api.Preview{p})
}

func runPreviewList(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newFlags(env, "preview ls", "preview ls THREAD [-o json]   (the live links of the thread's sandbox)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("preview ls: want exactly one thread id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var list api.PreviewList
	if err := cl.call(ctx, "GET", threadPath(pos[0])+"/previews", nil, &list); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, list)
	}
	return previewTable(env, list.Previews)
}

func runPreviewRm(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newFlags(env, "preview rm", "preview rm THREAD ID...   (revoked on every replica within a second)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("preview rm: want a thread id and at least one link id")
	}
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	thread, ids := pos[0], pos[1:]
	revoked := []string{}
	err = eachID(env, ids, func(id string) error {
		if err := cl.call(ctx, "DELETE", threadPath(thread)+"/previews/"+url.PathEscape(id), nil, nil); err != nil {
			return err
		}
		revoked = append(revoked, id)
		if c.output == "table" {
			fmt.Fprintln(env.Stdout, id)
		}
		return nil
	})
	if c.output == "json" {
		return errors.Join(writeJSON(env.Stdout, map[string]any{"thread": thread, "revoked": revoked}), err)
	}
	return err
}
