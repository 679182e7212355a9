package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIAdminUserAndMissingThread: an admin acts on a user's thread with
// --user, and is told when a thread does not exist instead of being shown
// its own (empty) thread of that name; a user cannot use --user on
// another; checkpoint create on a thread without files says so, not "no
// such checkpoint" (issue 40, point 9).
func TestCLIAdminUserAndMissingThread(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":admin,alice="+sha("alice-key")+",bob="+sha("bob-key"))
	g := f.start()
	bin, base := f.bin, g.URL
	sid := create(t, base, "alice-key", "a1")
	runCLI(t, bin, base, "alice-key", "checkpoint", "create", "a1", "--label", "mine").must(t, 0, "alice's checkpoint")

	// Without --user the admin's own user has no a1: said, not an empty list.
	if r := runCLI(t, bin, base, "ops-key", "checkpoint", "ls", "a1").must(t, 1, "admin ls without --user"); !strings.Contains(r.stderr, "no such thread") {
		t.Fatalf("admin ls a1: %s", r.stderr)
	}
	r := runCLI(t, bin, base, "ops-key", "checkpoint", "ls", "a1", "--user", "alice", "-o", "json").must(t, 0, "admin ls --user alice")
	var list struct {
		Checkpoints []struct {
			ID    string `json:"id"`
			Label string `json:"label"`
		} `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Checkpoints) != 1 || list.Checkpoints[0].Label != "mine" {
		t.Fatalf("admin ls --user alice: %v %s", err, r.stdout)
	}
	// The admin freezes alice's thread's sandbox, not one of its own.
	runCLI(t, bin, base, "ops-key", "freeze", "a1", "--user", "alice").must(t, 0, "admin freeze --user alice")
	if got := lsJSON(t, bin, base, "ops-key", "--user", "alice"); len(got) != 1 || got[0].SandboxID != sid || got[0].State != "frozen" {
		t.Fatalf("after admin freeze --user alice: %+v", got)
	}
	if got := lsJSON(t, bin, base, "ops-key", "--user", "ops"); len(got) != 0 {
		t.Fatalf("the admin got sandboxes of its own: %+v", got)
	}

	// A user naming another user is refused, and not shown its own.
	if r := runCLI(t, bin, base, "bob-key", "checkpoint", "ls", "a1", "--user", "alice").must(t, 1, "bob --user alice"); !strings.Contains(r.stderr, "403") {
		t.Fatalf("bob ls --user alice: %s", r.stderr)
	}
	runCLI(t, bin, base, "bob-key", "checkpoint", "create", "a1", "--user", "alice").must(t, 1, "bob create --user alice")

	// A thread without files: no such thread, not no such checkpoint.
	r = runCLI(t, bin, base, "alice-key", "checkpoint", "create", "never-ran").must(t, 1, "create on a missing thread")
	if !strings.Contains(r.stderr, "no such thread") || strings.Contains(r.stderr, "no such checkpoint") {
		t.Fatalf("create on a missing thread: %s", r.stderr)
	}
}
