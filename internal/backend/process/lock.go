package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// sidLock serialises create, destroy and stale-state cleanup of one sandbox
// id across every Process on the host sharing the state dir (another gateway
// process included), with flock on {StateDir}/{sid}.lock. The pool's Redis
// lock already serialises creators; this keeps the state files right even
// when two gateways share a data dir without sharing Redis.
type sidLock struct {
	f    *os.File
	path string
}

// lock waits for the id's lock, polling so that ctx is honoured.
func (p *Process) lock(ctx context.Context, sid string) (*sidLock, error) {
	interval := time.Millisecond
	for {
		l, err := p.tryLock(sid)
		if err != nil || l != nil {
			return l, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock sandbox %s: %w", sid, ctx.Err())
		case <-t.C:
		}
		interval = min(interval*2, 50*time.Millisecond)
	}
}

// tryLock takes the id's lock if it is free; nil, nil when it is held.
func (p *Process) tryLock(sid string) (*sidLock, error) {
	path := filepath.Join(p.cfg.StateDir, sid+".lock")
	for {
		f, err := openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open sandbox lock: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, nil
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock sandbox: %w", err)
		}
		// The holder before us may have removed the file after we opened it:
		// then we locked an orphaned inode and must lock the file now there.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return &sidLock{f: f, path: path}, nil
		}
		_ = f.Close()
	}
}

// lockAlias takes sid's lock through held, a lock the caller holds: sid's
// lock file becomes a second name of held's (a hard link, where creating a
// file costs a claim hundreds of microseconds on a journaling file system),
// so whoever locks either name waits for held. Where sid's file exists it
// is locked as usual. An alias holds no descriptor: held's unlock releases
// it, so it must come after the alias's.
func (p *Process) lockAlias(ctx context.Context, held *sidLock, sid string) (*sidLock, error) {
	path := filepath.Join(p.cfg.StateDir, sid+".lock")
	err := os.Link(held.path, path)
	if err == nil {
		return &sidLock{path: path}, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("lock sandbox %s: %w", sid, err)
	}
	return p.lock(ctx, sid)
}

// unlock releases the lock; remove also deletes the lock file, for ids that
// no longer have a sandbox (so lock files do not pile up).
func (l *sidLock) unlock(remove bool) {
	if remove {
		_ = os.Remove(l.path)
	}
	if l.f != nil {
		_ = l.f.Close()
	}
}
