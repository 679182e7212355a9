package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/internal/identity"
)

// Templates returns the configured templates in configuration order and
// the default's name ("" = none: the backend's configuration alone).
func (p *Pool) Templates() ([]Template, string) { return p.cfg.Templates, p.cfg.DefaultTemplate }

// CheckOptions validates o against the configured templates and limits
// (an *OptionError names the field).
func (p *Pool) CheckOptions(o Options) error { return p.templates.Check(o) }

// SetOptions stores (user, thread)'s create options, checked; when they
// make a different sandbox than the stored ones (another template, env or
// memory; metadata is the gateway's alone), a running sandbox of the
// thread is destroyed (its files stay) so that the next acquire makes one
// from these. Options are stored before any create reads them.
func (p *Pool) SetOptions(ctx context.Context, user, thread string, o Options) error {
	if err := p.templates.Check(o); err != nil {
		return err
	}
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode create options: %w", err)
	}
	sid := identity.SandboxID(user, thread)
	stored, changed, err := p.store.SetOptions(ctx, sid, data)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !changed {
		return nil
	}
	old, err := decodeOptions(sid, stored)
	if err != nil {
		return err
	}
	if p.templates.sameSandbox(old, o) {
		return nil
	}
	p.log.InfoContext(ctx, "thread's create options set", "sandbox_id", sid, "thread", thread, "template", o.Template)
	if err := p.DestroyThread(ctx, user, thread, ReasonOptions); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// Options returns the stored create options of sandbox sid (zero: none
// stored, the default template).
func (p *Pool) Options(ctx context.Context, sid string) (Options, error) {
	data, _, err := p.store.Options(ctx, sid)
	if err != nil {
		return Options{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	return decodeOptions(sid, data)
}

// decodeOptions decodes stored options (nil: none, the zero Options).
func decodeOptions(sid string, data []byte) (Options, error) {
	var o Options
	if data == nil {
		return o, nil
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return o, fmt.Errorf("%w: decode create options of %s: %w", ErrState, sid, err)
	}
	return o, nil
}

// createFrom resolves what sid's create is made of: its stored options
// (data, read with its record) and their template. A stored template the
// operator has since removed falls back to the default, logged: the thread
// keeps working.
func (p *Pool) createFrom(ctx context.Context, sid, thread string, data []byte) (Template, Options, error) {
	o, err := decodeOptions(sid, data)
	if err != nil {
		return Template{}, o, err
	}
	t, err := p.templates.pick(o.Template)
	if errors.Is(err, ErrTemplateUnknown) {
		p.log.WarnContext(ctx, "thread's template is no longer configured: the default's sandbox is created",
			"sandbox_id", sid, "thread", thread, "template", o.Template)
		o.Template = ""
		t, err = p.templates.pick("")
	}
	return t, o, err
}
