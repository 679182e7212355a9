package router

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/internal/auth"
)

func TestStreamCap(t *testing.T) {
	t.Parallel()
	full := errors.New("full")
	admin := auth.NewPrincipal("ops", auth.ScopeAdmin, nil)
	user := func(name string) *auth.Principal { return auth.NewPrincipal(name, auth.ScopeThreads, nil) }
	for _, tc := range []struct {
		name  string
		total int
		caps  StreamCaps
		take  []*auth.Principal // taken in order, each must succeed
		then  *auth.Principal
		want  error
	}{
		{"zero value: 8 per user", 256, StreamCaps{}, repeat(user("alice"), 8), user("alice"), errUserStreams},
		{"another user is not counted", 256, StreamCaps{}, repeat(user("alice"), 8), user("bob"), nil},
		{"non-admins stop at the reserve", 10, StreamCaps{PerUser: 10, AdminReserve: 4}, repeat(user("alice"), 6), user("bob"), full},
		{"an admin takes the reserve", 10, StreamCaps{PerUser: 10, AdminReserve: 4}, repeat(user("alice"), 6), admin, nil},
		{"an admin is bounded by the total", 4, StreamCaps{PerUser: 1, AdminReserve: 2}, repeat(admin, 4), admin, full},
		{"release gives a user's stream back", 256, StreamCaps{PerUser: 2}, repeat(user("alice"), 2), user("alice"), errUserStreams},
	} {
		s := newStreamCap(tc.total, tc.caps, full)
		var releases []func()
		for i, p := range tc.take {
			rel, err := s.acquire(p)
			if err != nil {
				t.Fatalf("%s: take %d (%s): %v", tc.name, i, p.User, err)
			}
			releases = append(releases, rel)
		}
		if _, err := s.acquire(tc.then); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.want != nil {
			releases[0]()
			if _, err := s.acquire(tc.then); err != nil {
				t.Errorf("%s, after a release: %v, want a stream", tc.name, err)
			}
		}
	}
}

func repeat(p *auth.Principal, n int) []*auth.Principal {
	out := make([]*auth.Principal, n)
	for i := range out {
		out[i] = p
	}
	return out
}

func TestStreamCapsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c  StreamCaps
		ok bool
	}{
		{StreamCaps{}, true},
		{StreamCaps{PerUser: 256, AdminReserve: 255}, true},
		{StreamCaps{PerUser: -1}, false},
		{StreamCaps{PerUser: 257}, false},
		{StreamCaps{AdminReserve: 256}, false},
		{StreamCaps{AdminReserve: -3}, false},
	} {
		if err := tc.c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.c, err, tc.ok)
		}
	}
}

func TestSessionSealing(t *testing.T) {
	t.Parallel()
	id, err := newSessionID()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newSessionID()
	sealed, err := id.seal("alice-key")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := id.open(sealed); err != nil || got != "alice-key" {
		t.Fatalf("open: %q %v", got, err)
	}
	if back, ok := parseSessionID(id.String()); !ok || back != id {
		t.Errorf("the cookie form does not parse back")
	}
	tampered := append([]byte{}, sealed...)
	tampered[len(tampered)-1] ^= 1
	for name, tc := range map[string]struct {
		id     sessionID
		sealed []byte
	}{
		"another id": {other, sealed},
		"tampered":   {id, tampered},
		"short":      {id, sealed[:4]},
		"empty":      {id, nil},
	} {
		if _, err := tc.id.open(tc.sealed); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
	for _, v := range []string{"", "x", id.String() + "A", id.String()[:42] + "!"} {
		if _, ok := parseSessionID(v); ok {
			t.Errorf("parseSessionID(%q) accepted", v)
		}
	}
	if id.sum() == other.sum() || len(id.sum()) != 64 {
		t.Errorf("session index %q", id.sum())
	}
}
