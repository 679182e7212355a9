package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// TestCLIFrozenState: after `gateway freeze`, ls, inspect and top show the
// sandbox frozen and --state frozen selects it (issue 40, point 4: they
// showed it active and refused the filter); its next request thaws it.
func TestCLIFrozenState(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":admin,alice="+sha("alice-key"))
	g := f.start()
	bin, base, admin := f.bin, g.URL, "ops-key"
	a1 := create(t, base, "alice-key", "a1")
	a2 := create(t, base, "alice-key", "a2")

	runCLI(t, bin, base, "alice-key", "freeze", "a1").must(t, 0, "freeze")
	states := map[string]string{}
	for _, s := range lsJSON(t, bin, base, admin) {
		states[s.SandboxID] = s.State
	}
	if states[a1] != "frozen" || states[a2] != "active" {
		t.Fatalf("ls after freeze: %v, want %s frozen and %s active", states, a1, a2)
	}
	if got := lsJSON(t, bin, base, admin, "--state", "frozen"); len(got) != 1 || got[0].SandboxID != a1 {
		t.Fatalf("ls --state frozen: %+v", got)
	}
	if got := lsJSON(t, bin, base, admin, "--state", "active"); len(got) != 1 || got[0].SandboxID != a2 {
		t.Fatalf("ls --state active: %+v", got)
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "ls").must(t, 0, "ls"); !regexp.MustCompile(a1 + `.*\sfrozen\s`).MatchString(r.stdout) {
		t.Fatalf("ls table:\n%s", r.stdout)
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "inspect", a1).must(t, 0, "inspect"); !regexp.MustCompile(`(?m)^State:\s+frozen$`).MatchString(r.stdout) {
		t.Fatalf("inspect:\n%s", r.stdout)
	}
	if r := runCLI(t, bin, base, admin, "sandboxes", "top", "--once", "--thread", "a1", "--interval", "10ms").must(t, 0, "top"); !strings.Contains(r.stdout, "STATE") ||
		!regexp.MustCompile(a1+`.*\sfrozen\s`).MatchString(r.stdout) {
		t.Fatalf("top:\n%s", r.stdout)
	}
	// A request thaws it: active again.
	runCLI(t, bin, base, "alice-key", "exec", "a1", "--", "true").must(t, 0, "exec thaws")
	if got := lsJSON(t, bin, base, admin, "--thread", "a1"); len(got) != 1 || got[0].State != "active" {
		t.Fatalf("after a request: %+v, want active", got)
	}
}
