package testutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// testBinEntries bounds the builds kept in the cache (an entry per command
// and source): a couple of worktrees or branches in turn each find theirs.
const testBinEntries = 4

// binary is one command of the module, found or built once per test
// process.
type binary struct {
	once sync.Once
	path string
	err  error
	// lock is the shared lock on the cache entry in use, held for the life
	// of the test process so that no other process prunes it.
	lock *os.File
}

var gatewayBin, sandboxBin binary

func (b *binary) get(t testing.TB, name, pkg string) string {
	t.Helper()
	b.once.Do(func() { b.path, b.lock, b.err = cachedBinary(name, pkg) })
	if b.err != nil {
		t.Fatalf("build %s: %v", pkg, b.err)
	}
	return b.path
}

// GatewayBinary returns the gateway binary (./cmd/gateway, race detector
// off: it is the system under test, run as a separate process) built from
// the current source. It is built once per source, whatever the number of
// test processes: into a cache outside the clone (TestBinCache) under a
// hash of everything the build reads, which keeps its newest few entries.
func GatewayBinary(t testing.TB) string {
	t.Helper()
	return gatewayBin.get(t, "gateway", "./cmd/gateway")
}

// SandboxBinary returns ./cmd/sandgate-sandbox, the sandbox server alone,
// built and cached like GatewayBinary. Its cache entry holds nothing else:
// beside the gateway binary, the process backend would start it instead
// (process.SandboxBinary).
func SandboxBinary(t testing.TB) string {
	t.Helper()
	return sandboxBin.get(t, sandboxspec.ServerBinary, "./cmd/sandgate-sandbox")
}

// TestBinCache is where GatewayBinary and SandboxBinary keep their builds:
// os.UserCacheDir()/sandgate/testbin, or under the temporary directory
// when there is no user cache.
func TestBinCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "sandgate-testbin")
	}
	return filepath.Join(dir, "sandgate", "testbin")
}

// buildEnv is the environment of the builds (static binaries), which
// their go list shares so that both pick the same files.
var buildEnv = []string{"CGO_ENABLED=0"}

// goCmd runs go with args in the module root, in the build's environment.
func goCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), buildEnv...)
	return cmd
}

// cachedBinary finds or builds pkg's cache entry for the current source,
// the binary named name in it, and holds a shared lock on it; an entry
// pruned between finding and locking it is made again.
func cachedBinary(name, pkg string) (string, *os.File, error) {
	key, err := sourceHash(pkg)
	if err != nil {
		return "", nil, err
	}
	cache := TestBinCache()
	entry := filepath.Join(cache, key)
	for {
		lock, err := holdEntry(entry, filepath.Join(entry, name), pkg)
		if errors.Is(err, errPruned) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		now := time.Now()
		_ = os.Chtimes(entry, now, now) // the most recently used
		pruneTestBins(cache, key)
		return filepath.Join(entry, name), lock, nil
	}
}

// holdEntry returns entry's lock held shared with bin in it, built first if
// missing. Users of an entry hold its shared lock for their life, so the
// exclusive lock is taken only to build: asking for it when the binary is
// there would wait for every other test process using it to exit.
func holdEntry(entry, bin, pkg string) (*os.File, error) {
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return nil, fmt.Errorf("test binary cache: %w", err)
	}
	lock, err := lockEntry(entry, syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err == nil {
		return lock, nil
	}
	lock.Close()
	if lock, err = lockEntry(entry, syscall.LOCK_EX); err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); errors.Is(err, fs.ErrNotExist) {
		err = buildInto(bin, pkg)
	}
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_SH)
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// errPruned: the entry was removed while its lock was awaited.
var errPruned = errors.New("cache entry pruned")

// lockEntry opens and locks entry's lock file (how: LOCK_EX or LOCK_SH,
// LOCK_NB added to not wait); errPruned when the file was removed meanwhile.
func lockEntry(entry string, how int) (*os.File, error) {
	path := filepath.Join(entry, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errPruned
		}
		return nil, fmt.Errorf("test binary cache: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock test binary cache entry: %w", err)
	}
	held, err1 := f.Stat()
	linked, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(held, linked) {
		f.Close()
		return nil, errPruned
	}
	return f, nil
}

// buildInto builds pkg to bin, through a temporary file renamed into
// place, so that no process ever sees half a binary.
func buildInto(bin, pkg string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	out, err := goCmd("build", "-o", tmp, pkg).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("test binary cache: %w", err)
	}
	return nil
}

// pruneTestBins removes the entries past the newest testBinEntries, except
// keep and those another process holds (its lock is busy).
func pruneTestBins(cache, keep string) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	type aged struct {
		name string
		mod  time.Time
	}
	var all []aged
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() {
			all = append(all, aged{e.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b aged) int { return b.mod.Compare(a.mod) })
	for _, e := range all[min(testBinEntries, len(all)):] {
		if e.name == keep {
			continue
		}
		dir := filepath.Join(cache, e.name)
		lock, err := lockEntry(dir, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			continue // in use, or gone already
		}
		_ = os.RemoveAll(dir)
		lock.Close()
	}
}

// sourceHash is a hash of what building pkg reads: the Go
// toolchain and target, the build's environment, go.mod, the files of the
// module's own packages it compiles (embedded files too) and the versions
// of the modules it uses (the module cache never changes a version).
func sourceHash(pkg string) (string, error) {
	const format = `{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}@{{.Version}}{{if .Replace}}=>{{.Replace.Path}}@{{.Replace.Version}}{{end}}{{end}}` +
		"\t{{.Dir}}\t{{if .Module}}{{if .Module.Main}}{{join .GoFiles \",\"}},{{join .SFiles \",\"}},{{join .EmbedFiles \",\"}}{{end}}{{end}}\n{{end}}"
	list, err := goCmd("list", "-deps", "-f", format, pkg).Output()
	if err != nil {
		return "", fmt.Errorf("list %s's packages: %w", pkg, errOutput(err))
	}
	env, err := goCmd("env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", errOutput(err))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q build %s\n", env, buildEnv, pkg)
	if err := hashFile(h, ModuleRoot(), "go.mod"); err != nil { // its go line sets language semantics
		return "", err
	}
	for line := range strings.Lines(string(list)) {
		pkg, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		dir, files, _ := strings.Cut(rest, "\t")
		fmt.Fprintln(h, pkg)
		for _, name := range strings.Split(files, ",") {
			if name == "" {
				continue
			}
			if err := hashFile(h, dir, name); err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// hashFile adds name (relative to dir, which is left out: a clone
// elsewhere hashes the same) and its content to h.
func hashFile(h io.Writer, dir, name string) error {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("hash the source: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\x00", name)
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hash the source: %w", err)
	}
	return nil
}

// errOutput is err with the command's stderr, when it has one.
func errOutput(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(bytes.TrimSpace(exit.Stderr)) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
	}
	return err
}

// ModuleRoot is the repository root (where go.mod is).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
