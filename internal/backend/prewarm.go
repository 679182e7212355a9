package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// LabelPrewarm marks a sandbox started before any thread asked for one (the
// prewarm pool); its value fingerprints the spec it was started from, so a
// gateway whose configuration changed never hands out a stale one.
const LabelPrewarm = "sandgate.prewarm"

// Binder is implemented by backends whose sandboxes can be started before
// their thread is known and bound to it later (the prewarm pool).
type Binder interface {
	// Claim binds the running, unclaimed sandbox warm to spec's identity
	// (SandboxID, User, Thread, Labels; spec.Secret is warm's own): once it
	// returns, Discover(spec.SandboxID), List, Alive and Destroy see it as
	// spec's sandbox, exactly as if Create(spec) had made it, and warm's id
	// names nothing. The caller has already moved warm's user data to the
	// thread (AdoptPrewarmDirs), holds both ids' locks and, on an error,
	// destroys the sandbox.
	Bind(ctx context.Context, warm Info, spec Spec) (Info, error)
}

// PrewarmDir is where a pre-started sandbox's user data lives until a
// thread claims it; claiming renames it to the thread's ThreadDir.
func PrewarmDir(dataDir, sid string) string {
	return filepath.Join(dataDir, "prewarm", sid, "user-data")
}

// PrewarmMounts returns the mounts of pre-started sandbox sid: the standard
// ones, with the user data in PrewarmDir. A bind mount follows its
// directory, not its path, so after AdoptPrewarmDirs the running sandbox
// sees the thread's directories at the virtual paths.
func PrewarmMounts(cfg MountConfig, sid string) ([]Mount, error) {
	return mountsUnder(PrewarmDir(cfg.DataDir, sid), cfg)
}

// ErrThreadHasData: the thread already has files of its own on the host,
// which a running pre-started sandbox cannot be given (its bind mounts are
// fixed): the thread gets a cold create instead.
var ErrThreadHasData = errors.New("thread already has user data")

// ThreadDirUnused reports whether the thread has no user data on the host:
// no directory, or only empty directories (a sandbox created and destroyed
// before anything was written).
func ThreadDirUnused(dataDir, user, thread string) (bool, error) {
	empty := true
	err := filepath.WalkDir(ThreadDir(dataDir, user, thread), func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() {
			empty = false
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%w: inspect thread dir: %w", ErrHostDirs, pathless(err))
	}
	return empty, nil
}

// AdoptPrewarmDirs makes pre-started sandbox pw's user data the thread's:
// an unused thread dir (only empty directories) is removed, then
// PrewarmDir(pw)'s parent is renamed to ThreadDir's, atomically, on the
// same file system. ErrThreadHasData when the thread has files: nothing is
// moved.
func AdoptPrewarmDirs(dataDir, pw, user, thread string) error {
	// The whole thread dir is renamed (user-data is all it holds): one
	// rename, where moving user-data alone costs a mkdir and an rmdir too.
	dst := filepath.Dir(ThreadDir(dataDir, user, thread))
	if err := removeEmptyDirs(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("%w: create thread dir: %w", ErrHostDirs, pathless(err))
	}
	if err := os.Rename(filepath.Dir(PrewarmDir(dataDir, pw)), dst); err != nil {
		return fmt.Errorf("%w: move prewarm dir to the thread: %w", ErrHostDirs, pathless(err))
	}
	return nil
}

// removeEmptyDirs removes dir if it holds only empty directories; a file
// found meanwhile makes it fail (ENOTEMPTY), never lose data.
func removeEmptyDirs(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHostDirs, pathless(err))
	}
	for _, e := range entries {
		if !e.IsDir() {
			return ErrThreadHasData
		}
		if err := removeEmptyDirs(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrThreadHasData, pathless(err))
	}
	return nil
}

// RemovePrewarmDirs deletes an unclaimed pre-started sandbox's user data
// after it was destroyed (sid is validated: the path stays in the data dir).
func RemovePrewarmDirs(dataDir, sid string) error {
	if err := ValidSandboxID(sid); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Dir(PrewarmDir(dataDir, sid))); err != nil {
		return fmt.Errorf("remove prewarm dir: %w", pathless(err))
	}
	return nil
}

// pathless is err without the host paths the os package puts in it: these
// errors are logged and may reach a status page.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return fmt.Errorf("%s: %w", le.Op, le.Err)
	}
	return err
}
