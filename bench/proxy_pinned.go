package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The small GET's CPU per request is measured twice (issue 42): as every
// workload is, with wrk, the proxy and the sandbox sharing the machine's
// cores as the scheduler likes, and pinned: wrk and the sandbox on one
// core, the proxy under test alone on the other, so that neither steals
// the proxy's core or its caches mid-request.
const (
	pinLoadCPU  = 0 // wrk and the sandbox
	pinProxyCPU = 1 // the proxy measured
)

// pinnedTitle names the pinned measurement's table.
const pinnedTitle = "Small GET with the proxy pinned to one core"

// whilePinned pins the sandbox's processes (sandbox) to pinLoadCPU and
// those of every target but direct to pinProxyCPU, runs fn with those
// targets (wrk belongs on pinLoadCPU), and unpins everything after. It
// needs two CPUs.
func whilePinned(targets []target, sandbox func() ([]int, error), fn func(proxies []target) error) (err error) {
	if runtime.NumCPU() < 2 {
		return errors.New("pinning needs 2 CPUs")
	}
	var pinned [][]int // the processes pinned, unpinned to every CPU after
	defer func() {
		for _, pids := range pinned {
			if uerr := pinProcs(pids, allCPUs()...); uerr != nil && err == nil {
				err = uerr
			}
		}
	}()
	pin := func(pids func() ([]int, error), cpu int) error {
		ps, err := pids()
		if err != nil {
			return err
		}
		pinned = append(pinned, ps)
		return pinProcs(ps, cpu)
	}
	if err := pin(sandbox, pinLoadCPU); err != nil {
		return fmt.Errorf("pin the sandbox: %w", err)
	}
	var proxies []target
	for _, t := range targets {
		if t.pids == nil {
			continue // direct: no proxy
		}
		if err := pin(t.pids, pinProxyCPU); err != nil {
			return fmt.Errorf("pin %s: %w", t.name, err)
		}
		proxies = append(proxies, t)
	}
	return fn(proxies)
}

// pinnedTable is the pinned cells as a table, and their figures.
func pinnedTable(proxies []target, cells []wrkResult, conns int, figures map[string]float64) Table {
	t := Table{Title: pinnedTitle, Columns: []string{"proxy", "req/s", "p50 / p99 ms", "CPU µs/req", "CPU ÷ nginx's"}}
	var nginx float64
	for i, p := range proxies {
		if p.name == "nginx" {
			nginx = cells[i].CPUPerRequestUS()
		}
	}
	for i, p := range proxies {
		c := cells[i]
		figures[proxyKey(conns, p.name, "rps_pinned")] = c.RPS()
		if c.CPUUS > 0 && c.Requests > 0 {
			figures[proxyKey(conns, p.name, "cpu_us_pinned")] = c.CPUPerRequestUS()
		}
		t.Rows = append(t.Rows, []string{p.name, fmt.Sprintf("%.0f", c.RPS()),
			fmt.Sprintf("%.2f / %.2f", float64(c.P50US)/1000, float64(c.P99US)/1000),
			fmt.Sprintf("%.1f", c.CPUPerRequestUS()), ratio(c.CPUPerRequestUS(), nginx)})
	}
	return t
}

// pinProcs sets the CPU affinity of every thread of each process in pids
// (a thread started later inherits its creator's).
func pinProcs(pids []int, cpus ...int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for _, pid := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pin thread %d of %d: %w", tid, pid, err)
			}
		}
	}
	return nil
}

func allCPUs() []int {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// startOn starts cmd on cpus (nil: wherever its parent runs). A child
// inherits the affinity of the thread that forks it, which Go does on the
// calling goroutine's thread: locked and pinned for the moment of the fork,
// the child's threads (wrk starts its own at once) are born pinned.
func startOn(cmd *exec.Cmd, cpus []int) error {
	if cpus == nil {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	defer func() { _ = unix.SchedSetaffinity(0, &old) }()
	return cmd.Start()
}
