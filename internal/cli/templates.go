package cli

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	units "github.com/docker/go-units"

	"github.com/sandgate/sandgate/internal/api"
)

// The template commands: `templates` lists what a create may choose from
// (GET /api/templates), `threads create` creates a thread's sandbox with
// options (PUT /threads/{thread}/sandbox with an api.CreateSandbox body).

func runTemplates(ctx context.Context, env Env, args []string) error {
	if len(args) > 0 && (args[0] == "ls" || args[0] == "list") {
		args = args[1:]
	}
	var c common
	fs := newThreadFlags(env, "templates", "templates [ls] [-o json]   (the templates threads create --template may name)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("templates takes no arguments (got %q)", pos[0])
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	cl.credential = "a threads-scoped credential"
	var list api.TemplateList
	if err := cl.call(ctx, "GET", "/api/templates", nil, &list); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, list)
	}
	t := newTable(env.Stdout, "NAME", "DEFAULT", "IMAGE", "MEMORY", "MAX MEMORY", "PREWARM")
	for _, tpl := range list.Templates {
		def := "no"
		if tpl.Default {
			def = "yes"
		}
		t.row(tpl.Name, def, orDash(tpl.Image), memory(tpl.Memory), memory(tpl.MaxMemory), strconv.Itoa(tpl.Prewarm))
	}
	return t.flush()
}

// memory is a byte count of a template, "-" for none (the backend's).
func memory(n int64) string {
	if n == 0 {
		return "-"
	}
	return bytesIEC(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// pairs is a repeatable KEY=VALUE flag (--env, --meta).
type pairs map[string]string

func (p *pairs) String() string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(*p)) {
		kv = append(kv, k+"="+(*p)[k])
	}
	return strings.Join(kv, ",")
}

func (p *pairs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	if *p == nil {
		*p = pairs{}
	}
	(*p)[k] = v
	return nil
}

// createFlags are threads create's options: the flags that make its body.
var createFlags = []string{"template", "env", "memory", "meta"}

func runThreadsCreate(ctx context.Context, env Env, args []string) error {
	var c common
	var req api.CreateSandbox
	var mem string
	var envs, meta pairs
	fs := newUserThreadFlags(env, "threads create", "threads create THREAD [--template NAME] [--env K=V]... [--memory 512m] [--meta K=V]...\n"+
		"  (creates the thread's sandbox, or answers the running one. The options replace the thread's stored ones whole:\n"+
		"  a change replaces a running sandbox, its files stay. Without any option the stored ones are kept;\n"+
		"  --template '' resets them to the default.)", &c)
	fs.StringVar(&req.Template, "template", "", "one of `gateway templates` (default: the default template)")
	fs.Var(&envs, "env", "KEY=VALUE set in the sandbox over the template's (repeatable)")
	fs.StringVar(&mem, "memory", "", "memory limit, e.g. 512m or 2g, at most the template's MAX MEMORY (default: the template's)")
	fs.Var(&meta, "meta", "KEY=VALUE metadata kept with the thread (repeatable)")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("threads create: want exactly one thread id")
	}
	if mem != "" {
		if req.Memory, err = units.RAMInBytes(strings.TrimSpace(mem)); err != nil || req.Memory <= 0 {
			return usagef("--memory %q: want a positive size such as 512m or 2g", mem)
		}
	}
	req.Env, req.Metadata = envs, meta
	// No option given: no body, so the thread keeps what it was created
	// with instead of being reset to the default.
	var body any
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(createFlags, f.Name) {
			body = req
		}
	})
	cl, err := threadClient(c)
	if err != nil {
		return err
	}
	var v api.Sandbox
	if err := cl.send(ctx, "PUT", threadPath(pos[0])+"/sandbox", c.userQuery(), body, &v); err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, v)
	}
	return sandboxTable(env, v)
}

// sandboxTable prints a thread's sandbox for people, extra rows after the
// thread. The capability URL (sandbox_url) is left to -o json: it is a
// credential, not for a terminal's scrollback.
func sandboxTable(env Env, v api.Sandbox, extra ...[2]string) error {
	t := newTable(env.Stdout, "Thread:", v.Thread)
	for _, r := range extra {
		t.row(r[0], r[1])
	}
	t.row("Sandbox ID:", v.SandboxID)
	t.row("Template:", orDash(v.Template))
	t.row("Backend:", v.Backend)
	t.row("State:", v.State)
	t.row("URL:", v.URL)
	return t.flush()
}
