package jail

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runLimitProbes runs, under testLimits, Go programs, a large write and a
// fork loop, emitting a result for each.
func runLimitProbes() int {
	rw := os.Getenv("JAIL_RW")
	for _, a := range []struct {
		name string
		size int
	}{{"go alloc 16MiB", 16 << 20}, {"go alloc 3GiB", 3 << 30}} {
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), scenarioEnv+"=alloc", "JAIL_ALLOC="+strconv.Itoa(a.size))
		out, err := cmd.CombinedOutput()
		emit(a.name, err, lastLine(string(out)))
	}
	limits, err := shell("cat /proc/self/limits")
	emit("limits", err, limits)
	_, err = shell(`head -c 2097152 /dev/zero > "$RW/big"`)
	size := int64(-1)
	if fi, serr := os.Stat(filepath.Join(rw, "big")); serr == nil {
		size = fi.Size()
	}
	emit("write 2MiB", err, strconv.FormatInt(size, 10))
	// The fork loop must come last: it leaves the sandbox at its process
	// limit; the sleeps die with the PID namespace when init exits.
	out, err := shell(`n=0; while [ $n -lt 100 ]; do sleep 60 >/dev/null 2>&1 & n=$((n+1)); echo $n; done`)
	emit("fork loop", err, lastNumber(out))
	return 0
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// lastNumber is the last line of s that is a number, or "".
func lastNumber(s string) string {
	n := ""
	for line := range strings.Lines(s) {
		if _, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
			n = strings.TrimSpace(line)
		}
	}
	return n
}

// runAlloc allocates and touches JAIL_ALLOC bytes.
func runAlloc() int {
	n, err := strconv.Atoi(os.Getenv("JAIL_ALLOC"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	b := make([]byte, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("allocated", len(b))
	return 0
}

func TestLockDownLimits(t *testing.T) {
	requireJail(t)
	t.Parallel()
	results := runJailed(t, "limits")
	checkResults(t, results, map[string]expect{
		"init lockdown": "ok", "init threads": "ok", "probes ran": "ok",
		"go alloc 16MiB": "ok", "go alloc 3GiB": "fail", "limits": "ok",
		"write 2MiB": "fail", "fork loop": "fail",
	})
	if r := results["write 2MiB"]; r.Out != strconv.Itoa(1<<20) {
		t.Errorf("file after a 2 MiB write under RLIMIT_FSIZE=1MiB is %s bytes, want %d", r.Out, 1<<20)
	}
	limits := results["limits"].Out
	for _, want := range []string{
		fmt.Sprintf("Max processes             %-20d %-20d processes", testLimits.sandboxProcesses(), testLimits.sandboxProcesses()),
		fmt.Sprintf("Max open files            %-20d %-20d files", testLimits.OpenFiles, testLimits.OpenFiles),
		fmt.Sprintf("Max file size             %-20d %-20d bytes", testLimits.FileSize, testLimits.FileSize),
		// 128 MiB asked, minAddressSpace given.
		fmt.Sprintf("Max address space         %-20d %-20d bytes", minAddressSpace, minAddressSpace),
		fmt.Sprintf("Max core file size        %-20d %-20d bytes", 0, 0),
	} {
		if !strings.Contains(limits, want) {
			t.Errorf("/proc/self/limits of a sandboxed process lacks %q:\n%s", want, limits)
		}
	}
	// The init, the shell and each sleep count against RLIMIT_NPROC, as
	// do the Go init's threads.
	n, err := strconv.Atoi(results["fork loop"].Out)
	if err != nil || n >= int(testLimits.sandboxProcesses()) || n < 3 {
		t.Errorf("fork loop started %q processes, want a few and fewer than %d", results["fork loop"].Out, testLimits.sandboxProcesses())
	}
}
