package pool

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// Template is one of the operator's templates (config `templates`) as the
// pool makes sandboxes from it: what the backend runs, and the env, egress
// policy, memory ceiling and pre-started count of its sandboxes.
type Template struct {
	Name string `json:"name"`
	// Backend is what the backend runs (its Name is always Name);
	// Backend.Memory is the sandboxes' memory unless a create asks for less
	// (or more, up to MaxMemory).
	Backend backend.Template `json:"-"`
	// Env is set in its sandboxes over Config.Env.
	Env map[string]string `json:"-"`
	// Egress replaces Config.Egress for its sandboxes; nil = the fleet's.
	Egress *backend.Egress `json:"-"`
	// MaxMemory is the most memory a create may ask for; 0 = Backend.Memory
	// (a create may only lower it).
	MaxMemory int64 `json:"-"`
	// Prewarm is how many of its sandboxes the prewarm pool keeps at least,
	// whatever the demand (Config.Prewarm is the total).
	Prewarm int `json:"-"`
	// IdleTimeout replaces Config.IdleTimeout for its sandboxes: 0 = the
	// fleet's, negative = never.
	IdleTimeout time.Duration `json:"-"`
	// FreezeAfter replaces Config.FreezeAfter for its sandboxes: 0 = the
	// fleet's, negative = never.
	FreezeAfter time.Duration `json:"-"`
}

// validTemplateName: a label value on every backend, and a word in a URL.
var validTemplateName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// Validate names the first bad field of the template.
func (t Template) Validate() error {
	if !validTemplateName.MatchString(t.Name) {
		return fmt.Errorf("template name %q: want 1-63 characters of [a-z0-9._-], starting and ending with a letter or digit", t.Name)
	}
	if t.Backend.Memory < 0 || t.MaxMemory < 0 {
		return fmt.Errorf("template %s: memory, max_memory: must not be negative", t.Name)
	}
	if t.MaxMemory > 0 && t.Backend.Memory > t.MaxMemory {
		return fmt.Errorf("template %s: memory %d exceeds max_memory %d", t.Name, t.Backend.Memory, t.MaxMemory)
	}
	if t.Prewarm < 0 {
		return fmt.Errorf("template %s: prewarm: must not be negative", t.Name)
	}
	if t.Egress != nil {
		if err := t.Egress.Validate(); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
	}
	return backend.ValidateSpec(backend.Spec{SandboxID: "0000000000000000", Env: t.Env})
}

// idleTimeouts is each template's idle timeout by name, the fleet's
// (fleet, defaults applied) where a template keeps it.
func (ts Templates) idleTimeouts(fleet time.Duration) map[string]time.Duration {
	return ts.durations(fleet, func(t Template) time.Duration { return t.IdleTimeout })
}

// freezeAfters is each template's freeze delay by name, as idleTimeouts.
func (ts Templates) freezeAfters(fleet time.Duration) map[string]time.Duration {
	return ts.durations(fleet, func(t Template) time.Duration { return t.FreezeAfter })
}

// durations is field of each template by name, fleet where it is 0.
func (ts Templates) durations(fleet time.Duration, field func(Template) time.Duration) map[string]time.Duration {
	out := make(map[string]time.Duration, len(ts.byName))
	for name, t := range ts.byName {
		out[name] = fleet
		if d := field(t); d != 0 {
			out[name] = d
		}
	}
	return out
}

// ceiling is the most memory a create of t may ask for.
func (t Template) ceiling() int64 { return max(t.MaxMemory, t.Backend.Memory) }

// Options are what a create asks for besides its thread (PUT
// /threads/{t}/sandbox): stored per thread, so every later incarnation
// (a create after idle expiry, a data-plane request) is made from them.
type Options struct {
	// Template names a configured template; "" = the fleet's default.
	Template string `json:"template,omitempty"`
	// Env is set in the sandbox over its template's.
	Env map[string]string `json:"env,omitempty"`
	// Memory in bytes; 0 = the template's.
	Memory int64 `json:"memory,omitempty"`
	// Metadata is the client's, kept with the thread and shown in views.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Bounds of Options: they are stored per thread and set in sandboxes.
const (
	maxOptionEntries = 64
	maxOptionBytes   = 4096
)

// reservedEnv are the variables a create may not set: the sandbox server's
// own (SANDGATE_*) and, since they steer traffic, the proxy ones (an egress
// change, which needs the admin's egress field).
var reservedEnv = []string{"SANDGATE_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"}

// OptionError is a create option the gateway refuses: Field names it;
// Forbidden marks a value past the operator's limits (403) rather than a
// malformed one (400).
type OptionError struct {
	Field     string
	Reason    string
	Forbidden bool
}

func (e *OptionError) Error() string { return e.Field + ": " + e.Reason }

// ErrTemplateUnknown: a stored thread's template is no longer configured.
var ErrTemplateUnknown = errors.New("template not configured")

// Templates are the configured templates by name, and the default.
type Templates struct {
	byName map[string]Template
	def    string
}

func newTemplates(list []Template, def string) Templates {
	t := Templates{byName: make(map[string]Template, len(list)), def: def}
	for _, tpl := range list {
		t.byName[tpl.Name] = tpl
	}
	return t
}

// validateTemplates checks the configured templates and the default.
func validateTemplates(list []Template, def string) error {
	seen := map[string]bool{}
	for _, t := range list {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("templates: %w", err)
		}
		if seen[t.Name] {
			return fmt.Errorf("templates: %s is configured twice", t.Name)
		}
		seen[t.Name] = true
	}
	if def != "" && !seen[def] {
		return fmt.Errorf("default_template: %q is not one of templates", def)
	}
	return nil
}

// Check validates o against the configured templates and limits.
func (ts Templates) Check(o Options) error {
	t, err := ts.pick(o.Template)
	if err != nil {
		return &OptionError{Field: "template", Reason: err.Error()}
	}
	if len(o.Env) > maxOptionEntries {
		return &OptionError{Field: "env", Reason: fmt.Sprintf("at most %d variables", maxOptionEntries)}
	}
	for name, value := range o.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") || strings.ContainsRune(value, 0) || len(name)+len(value) > maxOptionBytes {
			return &OptionError{Field: "env", Reason: fmt.Sprintf("%q: want NAME=value without NUL, at most %d bytes", name, maxOptionBytes)}
		}
		for _, r := range reservedEnv {
			if strings.HasPrefix(strings.ToUpper(name), r) {
				return &OptionError{Field: "env", Reason: name + " is the gateway's to set (egress goes through the egress field)", Forbidden: true}
			}
		}
	}
	switch {
	case o.Memory < 0:
		return &OptionError{Field: "memory", Reason: "must not be negative"}
	case o.Memory > 0 && t.ceiling() == 0:
		return &OptionError{Field: "memory", Reason: "this template has no memory limit to change", Forbidden: true}
	case o.Memory > t.ceiling():
		return &OptionError{Field: "memory", Reason: fmt.Sprintf("%d bytes exceeds the template's ceiling of %d", o.Memory, t.ceiling()), Forbidden: true}
	}
	if len(o.Metadata) > maxOptionEntries {
		return &OptionError{Field: "metadata", Reason: fmt.Sprintf("at most %d entries", maxOptionEntries)}
	}
	for k, v := range o.Metadata {
		if k == "" || len(k)+len(v) > maxOptionBytes {
			return &OptionError{Field: "metadata", Reason: fmt.Sprintf("%q: want a non-empty key, at most %d bytes with its value", k, maxOptionBytes)}
		}
	}
	return nil
}

// sameSandbox reports whether a and b make the same sandbox: the same
// template (the default named or not), env and memory (the template's
// named or not).
func (ts Templates) sameSandbox(a, b Options) bool {
	ta, errA := ts.pick(a.Template)
	tb, errB := ts.pick(b.Template)
	memory := func(t Template, o Options) int64 {
		if o.Memory > 0 {
			return o.Memory
		}
		return t.Backend.Memory
	}
	return errA == nil && errB == nil && ta.Name == tb.Name && maps.Equal(a.Env, b.Env) && memory(ta, a) == memory(tb, b)
}

// pick finds the template named name ("" = the default; none configured
// and no name = the zero Template, the backend's configuration alone).
func (ts Templates) pick(name string) (Template, error) {
	if name == "" {
		name = ts.def
	}
	if name == "" {
		return Template{}, nil
	}
	t, ok := ts.byName[name]
	if !ok {
		return Template{}, fmt.Errorf("%w: %q (GET /api/templates lists them)", ErrTemplateUnknown, name)
	}
	return t, nil
}

// apply completes spec (identity, mounts, secret set) from template t, the
// per-create options o and the thread's stored egress policy (set = an
// admin chose one).
func (r recipe) apply(spec backend.Spec, t Template, o Options, egress backend.Egress, set bool) backend.Spec {
	spec.Template = t.Backend
	spec.Template.Name = t.Name
	if o.Memory > 0 {
		spec.Template.Memory = o.Memory
	}
	switch {
	case set:
		spec.Egress = egress
	case t.Egress != nil:
		spec.Egress = *t.Egress
	default:
		spec.Egress = r.egress
	}
	env := r.env
	if len(t.Env) > 0 || len(o.Env) > 0 {
		env = maps.Clone(r.env)
		if env == nil {
			env = make(map[string]string, len(t.Env)+len(o.Env))
		}
		maps.Copy(env, t.Env)
		maps.Copy(env, o.Env)
	}
	return r.build(spec, env)
}
