package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// crashEnv tells the test binary, run again as a child by the crash
// tests, to be a gateway that restores the thread or settles it:
// "<restore|settle> <point> <data dir> <checkpoint id>".
const crashEnv = "CHECKPOINT_TEST_CRASH"

// The thread the crash tests restore, laid out as the gateway does.
const crashUser, crashThread = "u", "t"

// TestMain runs the test binary as the crash tests' child when crashEnv
// names a job, and the tests otherwise.
func TestMain(m *testing.M) {
	if spec := os.Getenv(crashEnv); spec != "" {
		if err := crashChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild is the child of the crash tests: it restores the thread, or
// settles it as a gateway's start does, and kills itself with SIGKILL at
// hook point <point> (0: never; it then prints how many points it passed).
func crashChild(spec string) error {
	var mode, dataDir, id string
	var at int
	if _, err := fmt.Sscan(spec, &mode, &at, &dataDir, &id); err != nil {
		return fmt.Errorf("%s=%q: %w", crashEnv, spec, err)
	}
	points := 0
	stepHook = func() {
		if points++; points == at {
			_ = unix.Kill(os.Getpid(), unix.SIGKILL)
			select {} // SIGKILL is not handled: the process ends here
		}
	}
	threads, err := NewThreads(dataDir, Config{})
	if err != nil {
		return err
	}
	if mode == "settle" {
		_, err = threads.Settle(context.Background())
	} else {
		err = threads.Restore(context.Background(), crashUser, crashThread, id, nil)
	}
	if err != nil {
		return err
	}
	fmt.Printf("points=%d\n", points)
	return nil
}

// crashFixture is a data dir whose thread has a checkpoint of one tree
// and a workspace changed everywhere since.
type crashFixture struct {
	dataDir, ws, id string
	old, restored   map[string]node
}

func newCrashFixture(t *testing.T) crashFixture {
	t.Helper()
	ctx, dataDir := ctxT(t), tempDir(t)
	threads, err := NewThreads(dataDir, Config{})
	must(t, err)
	ws := threads.Workspace(crashUser, crashThread)
	must(t, os.MkdirAll(ws, 0o700))
	buildTree(t, ws)
	restored := manifest(t, ws)
	info, err := threads.Create(ctx, crashUser, crashThread, "", nil)
	must(t, err)
	mutate(t, ws)
	return crashFixture{dataDir: dataDir, ws: ws, id: info.ID, old: manifest(t, ws), restored: restored}
}

// inChild runs crashChild (mode restore or settle) with point
// at and returns its output; killed tells whether it died of SIGKILL.
func (f crashFixture) inChild(t *testing.T, mode string, at int) (out string, killed bool) {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s %s", crashEnv, mode, at, f.dataDir, f.id))
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return string(b), true
		}
	}
	if err != nil {
		t.Fatalf("restoring child: %v\n%s", err, b)
	}
	return string(b), false
}

// countPoints runs the child through without a kill and returns how many
// hook points it passed.
func (f crashFixture) countPoints(t *testing.T, mode string) int {
	t.Helper()
	out, killed := f.inChild(t, mode, 0)
	if killed {
		t.Fatalf("child killed without a point to stop at:\n%s", out)
	}
	_, after, _ := strings.Cut(out, "points=")
	points, err := strconv.Atoi(strings.Fields(after + " x")[0])
	if err != nil {
		t.Fatalf("no point count in the child's output:\n%s", out)
	}
	return points
}

// leftovers lists what a restore may leave: temp dirs beside the
// workspace, a journal in the thread's checkpoint root.
func (f crashFixture) leftovers(t *testing.T) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(filepath.Dir(f.ws), ".ckpt-*"))
	must(t, err)
	for _, n := range []string{journalName, journalTmpName} {
		p := filepath.Join(f.dataDir, "checkpoints", crashUser, crashThread, n)
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// A gateway killed (SIGKILL, a real process) at any point of a restore
// leaves a thread that the next gateway's start settles before serving it:
// the workspace is then exactly the old tree or exactly the checkpoint's,
// every entry's bytes, mode, times and owner compared, and nothing is left
// beside it. The points: the stage journal, the staged copy, the trash,
// the swap journal (before the first rename), every step of the swap, the
// clean journal, the stage's and the trash's removals. Up to the last
// step the swap is rolled back; from the clean journal on it is complete.
func TestRestoreCrash(t *testing.T) {
	t.Parallel()
	probe := newCrashFixture(t)
	points := probe.countPoints(t, "restore")
	sameManifest(t, "workspace restored by an uninterrupted child", probe.restored, manifest(t, probe.ws))
	const afterSwap = 3 // the clean journal, the two removals
	steps := points - 4 - afterSwap
	if steps < 30 {
		t.Fatalf("%d hook points, %d swap steps: the tree should need more", points, steps)
	}

	for at := 1; at <= points; at++ {
		t.Run(fmt.Sprintf("point%02d", at), func(t *testing.T) {
			t.Parallel()
			f := newCrashFixture(t)
			if out, killed := f.inChild(t, "restore", at); !killed {
				t.Fatalf("the child was not killed at point %d:\n%s", at, out)
			}
			threads, err := NewThreads(f.dataDir, Config{})
			must(t, err)
			settled, err := threads.Settle(ctxT(t))
			if err != nil || settled != 1 {
				t.Fatalf("Settle after a kill at point %d: %d settled, %v", at, settled, err)
			}
			want, what := f.old, "the old tree"
			if at > points-afterSwap {
				want, what = f.restored, "the checkpoint's tree"
			}
			sameManifest(t, fmt.Sprintf("workspace killed at point %d of %d, settled: want %s", at, points, what),
				want, manifest(t, f.ws))
			if left := f.leftovers(t); len(left) > 0 {
				t.Fatalf("left %v", left)
			}
			// The thread restores normally afterwards.
			must(t, threads.Restore(ctxT(t), crashUser, crashThread, f.id, nil))
			sameManifest(t, "workspace restored after settling", f.restored, manifest(t, f.ws))
		})
	}
}

// A gateway killed while it settles a restore a crash stopped (at each
// undone rename, after the clean journal, after each removal) leaves a
// thread the next start settles all the same: the old tree exactly,
// nothing left.
func TestSettleCrash(t *testing.T) {
	t.Parallel()
	// The restore is killed after its last rename, with every step to undo.
	probe := newCrashFixture(t)
	lastStep := probe.countPoints(t, "restore") - 3
	probe = newCrashFixture(t)
	if out, killed := probe.inChild(t, "restore", lastStep); !killed {
		t.Fatalf("the restoring child was not killed:\n%s", out)
	}
	points := probe.countPoints(t, "settle")
	sameManifest(t, "workspace settled by an uninterrupted child", probe.old, manifest(t, probe.ws))
	if points < 20 {
		t.Fatalf("%d hook points in settling: the swap should have more moves to undo", points)
	}

	for at := 1; at <= points; at++ {
		t.Run(fmt.Sprintf("point%02d", at), func(t *testing.T) {
			t.Parallel()
			f := newCrashFixture(t)
			if out, killed := f.inChild(t, "restore", lastStep); !killed {
				t.Fatalf("the restoring child was not killed:\n%s", out)
			}
			if out, killed := f.inChild(t, "settle", at); !killed {
				t.Fatalf("the settling child was not killed at point %d:\n%s", at, out)
			}
			threads, err := NewThreads(f.dataDir, Config{})
			must(t, err)
			if settled, err := threads.Settle(ctxT(t)); err != nil || settled != 1 {
				t.Fatalf("Settle after a kill at point %d of settling: %d settled, %v", at, settled, err)
			}
			sameManifest(t, fmt.Sprintf("workspace killed at point %d of %d of settling, settled again", at, points),
				f.old, manifest(t, f.ws))
			if left := f.leftovers(t); len(left) > 0 {
				t.Fatalf("left %v", left)
			}
		})
	}
}

// Between a crash and the next gateway's start the sandbox still runs, and
// its tenant owns the workspace: it replaces every directory there with a
// symlink to a host directory that holds entries of the same names, so a
// rollback that followed a link would rename or remove host files.
// Settling must change nothing of the host, whatever it decides for the
// thread.
func TestSettleFollowsNoTenantSymlink(t *testing.T) {
	t.Parallel()
	probe := newCrashFixture(t)
	mid := 4 + (probe.countPoints(t, "restore")-7)/2 // a kill half way through the swap

	f := newCrashFixture(t)
	if out, killed := f.inChild(t, "restore", mid); !killed {
		t.Fatalf("the child was not killed at point %d:\n%s", mid, out)
	}
	entries, err := os.ReadDir(f.ws)
	must(t, err)
	hosts := map[string]map[string]node{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p, host := filepath.Join(f.ws, e.Name()), tempDir(t)
		names, err := os.ReadDir(p)
		must(t, err)
		for _, n := range names {
			if n.IsDir() {
				must(t, os.Mkdir(filepath.Join(host, n.Name()), 0o700))
			} else {
				must(t, os.WriteFile(filepath.Join(host, n.Name()), []byte("host file"), 0o600))
			}
		}
		hosts[host] = manifest(t, host)
		must(t, os.Rename(p, p+".tenant"))
		must(t, os.Symlink(host, p))
	}
	if len(hosts) == 0 {
		t.Fatal("the workspace has no directory to replace")
	}
	threads, err := NewThreads(f.dataDir, Config{})
	must(t, err)
	_, _ = threads.Settle(ctxT(t)) // refusing the thread is as good as settling it
	for host, before := range hosts {
		sameManifest(t, "a host directory a tenant's symlink points at", before, manifest(t, host))
	}
}
