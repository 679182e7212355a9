package router

import (
	"testing"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
)

func TestStatusEventVisibility(t *testing.T) {
	t.Parallel()
	admin := auth.NewPrincipal("ops", auth.ScopeAdmin, nil)
	alice := auth.NewPrincipal("alice", auth.ScopeThreads, nil)
	narrow := auth.NewPrincipal("alice", auth.ScopeThreads, []string{"web-*"})
	for _, tc := range []struct {
		name string
		p    *auth.Principal
		e    events.Event
		want bool
	}{
		{"admin sees anyone's", admin, events.Event{User: "bob", Thread: "x"}, true},
		{"user sees its own", alice, events.Event{User: "alice", Thread: "x"}, true},
		{"user does not see another's", alice, events.Event{User: "bob", Thread: "x"}, false},
		{"user does not see unowned", alice, events.Event{Thread: "x"}, false},
		{"thread patterns apply", narrow, events.Event{User: "alice", Thread: "x"}, false},
		{"within the patterns", narrow, events.Event{User: "alice", Thread: "web-1"}, true},
		{"no thread (a queued create)", narrow, events.Event{User: "alice"}, true},
	} {
		if got := visible(tc.p, tc.e); got != tc.want {
			t.Errorf("%s: visible = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStatusErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    events.Event
		want bool
	}{
		{events.Event{Type: events.Failed, Reason: "image not found"}, true},
		{events.Event{Type: events.Destroyed, Reason: "idle"}, false},
		{events.Event{Type: events.Destroyed, Reason: "client"}, false},
		{events.Event{Type: events.Destroyed, Reason: "evicted"}, false},
		{events.Event{Type: events.Destroyed, Reason: "provisioner_api"}, false},
		{events.Event{Type: events.Destroyed, Reason: "interrupted"}, true},
		{events.Event{Type: events.Destroyed, Reason: "dead"}, true},
		{events.Event{Type: events.Ready}, false},
	} {
		if got := isError(tc.e); got != tc.want {
			t.Errorf("isError(%s %q) = %v, want %v", tc.e.Type, tc.e.Reason, got, tc.want)
		}
	}
}
