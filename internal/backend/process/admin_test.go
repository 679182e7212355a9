package process

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// TestLogsTailAndLeftovers: the log of a sandbox that no longer runs is
// served (whole or its last lines), listed as a leftover, and removed.
func TestLogsTailAndLeftovers(t *testing.T) {
	t.Parallel()
	p, err := New(Config{StateDir: t.TempDir(), Isolation: IsolationNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sid := identity.SandboxID("u", "dead")
	if err := os.WriteFile(p.logPath(sid), []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for tail, want := range map[int]string{0: "one\ntwo\nthree\n", 1: "three\n", 2: "two\nthree\n", 9: "one\ntwo\nthree\n"} {
		rc, err := p.Logs(ctx, backend.Info{SandboxID: sid}, backend.LogOptions{Tail: tail})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != want {
			t.Errorf("tail %d: %q, want %q", tail, got, want)
		}
	}
	left, err := p.Leftovers(ctx, "any")
	if err != nil || len(left) != 1 || left[0].SandboxID != sid || left[0].Kind != "log" {
		t.Fatalf("leftovers: %+v %v", left, err)
	}
	if err := p.RemoveLeftover(ctx, backend.Leftover{Kind: "log", Name: "../x.log", SandboxID: sid}); err == nil {
		t.Fatal("a name that is not the sandbox's log was accepted")
	}
	if err := p.RemoveLeftover(ctx, left[0]); err != nil {
		t.Fatal(err)
	}
	if fileExists(p.logPath(sid)) {
		t.Fatal("log still there")
	}
	if _, err := p.Stats(ctx, backend.Info{SandboxID: sid, Incarnation: "999999-1"}); err == nil {
		t.Fatal("stats of a sandbox that does not run")
	}
}
