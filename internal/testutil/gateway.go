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
)

// testBinEntries bounds the gateway builds kept in the cache: a few
// worktrees or branches in turn each find theirs.
const testBinEntries = 4

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	// buildLock is the shared lock on the cache entry in use, held for the
	// life of the test process so that no other process prunes it.
	buildLock *os.File
)

// GatewayBinary returns the gateway binary (./cmd/gateway, race detector
// off: it is the system under test, run as a separate process) built from
// the current source. It is built once per source, whatever the number of
// test processes: into a cache outside the clone (TestBinCache) under a
// hash of everything the build reads, which keeps its newest few entries.
func GatewayBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildPath, buildErr = cachedGateway() })
	if buildErr != nil {
		t.Fatalf("build gateway: %v", buildErr)
	}
	return buildPath
}

// TestBinCache is where GatewayBinary keeps its builds:
// os.UserCacheDir()/sandgate/testbin, or under the temporary directory
// when there is no user cache.
func TestBinCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "sandgate-testbin")
	}
	return filepath.Join(dir, "sandgate", "testbin")
}

// The gateway's package and the environment of its build (a static
// binary), which its go list shares so that both pick the same files.
const gatewayPkg = "./cmd/gateway"

var gatewayBuildEnv = []string{"CGO_ENABLED=0"}

// goCmd runs go with args in the module root, in the build's environment.
func goCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), gatewayBuildEnv...)
	return cmd
}

// cachedGateway finds or builds the cache entry of the current source and
// holds a shared lock on it; an entry pruned between finding and locking
// it is made again.
func cachedGateway() (string, error) {
	key, err := gatewaySourceHash()
	if err != nil {
		return "", err
	}
	cache := TestBinCache()
	entry := filepath.Join(cache, key)
	for {
		if err := os.MkdirAll(entry, 0o755); err != nil {
			return "", fmt.Errorf("test binary cache: %w", err)
		}
		lock, err := lockEntry(entry, syscall.LOCK_EX)
		if errors.Is(err, errPruned) {
			continue
		}
		if err != nil {
			return "", err
		}
		bin := filepath.Join(entry, "gateway")
		if _, err := os.Stat(bin); errors.Is(err, fs.ErrNotExist) {
			err = buildInto(bin)
		}
		if err == nil {
			err = syscall.Flock(int(lock.Fd()), syscall.LOCK_SH)
		}
		if err != nil {
			lock.Close()
			return "", err
		}
		now := time.Now()
		_ = os.Chtimes(entry, now, now) // the most recently used
		buildLock = lock
		pruneTestBins(cache, key)
		return bin, nil
	}
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

// buildInto builds the gateway to bin, through a temporary file renamed
// into place, so that no process ever sees half a binary.
func buildInto(bin string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	out, err := goCmd("build", "-o", tmp, gatewayPkg).CombinedOutput()
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

// gatewaySourceHash is a hash of what building the gateway reads: the Go
// toolchain and target, the build's environment, go.mod, the files of the
// module's own packages it compiles (embedded files too) and the versions
// of the modules it uses (the module cache never changes a version).
func gatewaySourceHash() (string, error) {
	const format = `{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}@{{.Version}}{{if .Replace}}=>{{.Replace.Path}}@{{.Replace.Version}}{{end}}{{end}}` +
		"\t{{.Dir}}\t{{if .Module}}{{if .Module.Main}}{{join .GoFiles \",\"}},{{join .SFiles \",\"}},{{join .EmbedFiles \",\"}}{{end}}{{end}}\n{{end}}"
	list, err := goCmd("list", "-deps", "-f", format, gatewayPkg).Output()
	if err != nil {
		return "", fmt.Errorf("list the gateway's packages: %w", errOutput(err))
	}
	env, err := goCmd("env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", errOutput(err))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q build %s\n", env, gatewayBuildEnv, gatewayPkg)
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
		return fmt.Errorf("hash the gateway's source: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\x00", name)
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hash the gateway's source: %w", err)
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
