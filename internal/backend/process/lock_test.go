package process

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLockAlias: a claim locks the thread's id through the pre-started
// one's lock file; nobody else can lock either id until the claim ends,
// and the thread's lock file stays a lock file after it.
func TestLockAlias(t *testing.T) {
	t.Parallel()
	p := &Process{cfg: Config{StateDir: t.TempDir()}}
	ctx := t.Context()
	held := func(sid string) bool {
		t.Helper()
		l, err := p.tryLock(sid)
		if err != nil {
			t.Fatal(err)
		}
		if l != nil {
			l.unlock(false)
		}
		return l == nil
	}

	lw, err := p.lock(ctx, "pw")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := p.lockAlias(ctx, lw, "sid")
	if err != nil {
		t.Fatal(err)
	}
	if ls.f != nil {
		t.Error("the alias opened a file of its own")
	}
	if !held("sid") || !held("pw") {
		t.Fatal("another caller locked an id during the claim")
	}
	ls.unlock(false)
	if !held("sid") {
		t.Fatal("the alias's unlock released the claim's lock")
	}
	lw.unlock(true)
	if _, err := os.Stat(filepath.Join(p.cfg.StateDir, "pw.lock")); !os.IsNotExist(err) {
		t.Errorf("pw.lock after the claim: %v", err)
	}
	if held("sid") {
		t.Error("sid still locked after the claim")
	}

	// A failed claim removes the alias and keeps pw's lock until its own unlock.
	lw, _ = p.lock(ctx, "pw2")
	ls, err = p.lockAlias(ctx, lw, "sid2")
	if err != nil {
		t.Fatal(err)
	}
	ls.unlock(true)
	if _, err := os.Stat(filepath.Join(p.cfg.StateDir, "sid2.lock")); !os.IsNotExist(err) || !held("pw2") {
		t.Errorf("after a failed claim: sid2.lock %v, pw2 held %v", err, held("pw2"))
	}
	lw.unlock(true)

	// Where the thread's lock file exists it is locked as usual: waited for
	// while another holds it.
	other, _ := p.lock(ctx, "sid")
	lw, _ = p.lock(ctx, "pw3")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.lockAlias(short, lw, "sid"); err == nil {
		t.Error("lockAlias took a lock another holds")
	}
	other.unlock(false)
	ls, err = p.lockAlias(ctx, lw, "sid")
	if err != nil || ls.f == nil {
		t.Fatalf("lockAlias of a free existing lock file: %v (own file %v)", err, ls != nil && ls.f != nil)
	}
	ls.unlock(false)
	lw.unlock(true)
}
