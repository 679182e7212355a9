package router

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
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
		{events.Event{Type: events.Failed, Cause: "image not found"}, true},
		{events.Event{Type: events.Destroyed, Cause: "idle"}, false},
		{events.Event{Type: events.Destroyed, Cause: "client"}, false},
		{events.Event{Type: events.Destroyed, Cause: "evicted"}, false},
		{events.Event{Type: events.Destroyed, Cause: "provisioner_api"}, false},
		{events.Event{Type: events.Destroyed, Cause: "admin"}, false}, // the operator's own, CLI or status page
		{events.Event{Type: events.Destroyed, Cause: "max_lifetime"}, false},
		{events.Event{Type: events.Destroyed, Cause: "options"}, false},
		{events.Event{Type: events.Destroyed, Cause: "prewarm_trim"}, false},
		{events.Event{Type: events.Destroyed, Cause: "quota"}, false},
		{events.Event{Type: events.Destroyed, Cause: "failed_health"}, true},
		{events.Event{Type: events.Destroyed, Cause: "vanished"}, true},
		{events.Event{Type: events.Destroyed, Cause: "something new"}, true},
		{events.Event{Type: events.Destroyed, Cause: "interrupted"}, true},
		{events.Event{Type: events.Destroyed, Cause: "dead"}, true},
		{events.Event{Type: events.Ready}, false},
	} {
		if got := isError(tc.e); got != tc.want {
			t.Errorf("isError(%s %q) = %v, want %v", tc.e.Type, tc.e.Cause, got, tc.want)
		}
	}
}

// TestStatusRowsShowTemplate: over a real pool and redis-server, each row
// of the sandboxes table shows the template its sandbox was made from
// (active and warm alike), "—" for none, a frozen one's state as frozen
// (not active, as its index says), and every row has a cell per column.
func TestStatusRowsShowTemplate(t *testing.T) {
	t.Parallel()
	p, _, store := poolOf(t, pool.Config{MaxSandboxes: 8, Templates: []pool.Template{
		{Name: "py", Backend: backend.Template{Name: "py", Image: "python:3.12"}},
	}})
	gw := httptest.NewServer(New(Deps{Pool: PoolOf(p), Aliases: stubPool{}, Status: Status{Source: store}}))
	t.Cleanup(gw.Close)
	do := func(method, path, body string) string {
		t.Helper()
		req, _ := http.NewRequest(method, gw.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := gw.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
		return string(data)
	}
	do("PUT", "/threads/plain/sandbox", "")
	do("PUT", "/threads/py-active/sandbox", `{"template":"py"}`)
	do("PUT", "/threads/py-warm/sandbox", `{"template":"py"}`)
	do("DELETE", "/threads/py-warm/sandbox", "")
	// Marked frozen in Redis, as the freezer and `gateway freeze` mark it:
	// the index still says active, the page must say frozen.
	do("PUT", "/threads/cold/sandbox", "")
	ctx := context.Background()
	cold, _, err := store.Get(ctx, identity.SandboxID(auth.Local().User, "cold"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Freeze(ctx, cold.SandboxID, cold.Incarnation, time.Now(), time.Now()); !ok || err != nil {
		t.Fatalf("mark frozen: %v %v", ok, err)
	}

	user := auth.Local().User
	want := map[string][]string{ // by sandbox id: state, backend, template, user, thread
		identity.SandboxID(user, "plain"):     {"active", "http", "—", user, "plain"},
		identity.SandboxID(user, "py-active"): {"active", "http", "py", user, "py-active"},
		identity.SandboxID(user, "py-warm"):   {"warm", "http", "py", user, "py-warm"},
		identity.SandboxID(user, "cold"):      {"frozen", "http", "—", user, "cold"},
	}
	for _, path := range []string{"/status", "/status/sandboxes"} {
		page := do("GET", path, "")
		table := regexp.MustCompile(`(?s)<table id="sandboxes">.*?</table>`).FindString(page)
		heads := regexp.MustCompile(`<th>([^<]*)</th>`).FindAllStringSubmatch(table, -1)
		if len(heads) < 3 || heads[2][1] != "Template" {
			t.Fatalf("%s: the table's columns %q lack Template after Backend", path, heads)
		}
		rows := regexp.MustCompile(`(?s)<tr data-sandbox="([0-9a-f]+)"[^>]*>(.*?)</tr>`).FindAllStringSubmatch(table, -1)
		if len(rows) != len(want) {
			t.Fatalf("%s: %d rows, want %d:\n%s", path, len(rows), len(want), table)
		}
		for _, row := range rows {
			cells := regexp.MustCompile(`<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(row[2], -1)
			var got []string
			for _, c := range cells {
				got = append(got, c[1])
			}
			if len(got) != len(heads) || !slices.Equal(got[:5], want[row[1]]) {
				t.Errorf("%s: row %s: cells %q, want %d cells starting %q", path, row[1], got, len(heads), want[row[1]])
			}
		}
	}
}
