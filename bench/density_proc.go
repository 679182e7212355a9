package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// memRollup is what the density suite reads from /proc/PID/smaps_rollup,
// in bytes: PSS splits each shared page among the processes mapping it,
// so a sum over processes counts every page once.
type memRollup struct {
	rss, pss, pssAnon, pssFile int64
}

func (m *memRollup) add(o memRollup) {
	m.rss, m.pss, m.pssAnon, m.pssFile = m.rss+o.rss, m.pss+o.pss, m.pssAnon+o.pssAnon, m.pssFile+o.pssFile
}

func readRollup(pid int) (memRollup, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memRollup{}, err
	}
	return parseRollup(data), nil
}

// parseRollup reads the kB fields of smaps_rollup that memRollup keeps.
func parseRollup(data []byte) memRollup {
	var m memRollup
	fields := map[string]*int64{"Rss:": &m.rss, "Pss:": &m.pss, "Pss_Anon:": &m.pssAnon, "Pss_File:": &m.pssFile}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		if p, ok := fields[f[0]]; ok {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			*p = kb << 10
		}
	}
	return m
}

// procTree is every process's parent, from one walk of /proc.
type procTree map[int][]int

func readProcTree() (procTree, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	t := procTree{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		data, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		i := bytes.LastIndexByte(data, ')')
		if f := strings.Fields(string(data[i+1:])); i >= 0 && len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				t[ppid] = append(t[ppid], pid)
			}
		}
	}
	return t, nil
}

// descendants are root's descendants, root excluded.
func (t procTree) descendants(root int) []int {
	var out []int
	stack := []int{root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range t[p] {
			out = append(out, c)
			stack = append(stack, c)
		}
	}
	return out
}

// procGroup is the summed footprint of a set of processes.
type procGroup struct {
	procs, threads int
	mem            memRollup
	cpu            time.Duration
}

// measureProcs sums the memory, threads and CPU of pids; a process gone
// since the walk is skipped.
func measureProcs(pids []int) procGroup {
	var g procGroup
	for _, pid := range pids {
		m, err := readRollup(pid)
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue
		}
		g.procs++
		g.mem.add(m)
		g.cpu += st.cpu
		g.threads += statusInt(pid, "Threads:")
	}
	return g
}

// groupCPUOf is the CPU time pids have used (gone ones count 0).
func groupCPUOf(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		if c, err := processCPU(pid); err == nil {
			total += c
		}
	}
	return total
}

// statusInt is a numeric field of /proc/PID/status (0 if unreadable).
func statusInt(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// meminfo is a /proc/meminfo field in bytes.
func meminfo(field string) int64 { return readMeminfo()[field] }

// readMeminfo is every /proc/meminfo field in bytes, from one read (nil
// if it cannot be read).
func readMeminfo() map[string]int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) > 0 {
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			out[name] = kb << 10
		}
	}
	return out
}

// kernelMem is the host's kernel memory by kind (/proc/meminfo): what a
// sandbox costs beyond its processes' pages (namespaces, cgroups, mounts
// and sockets are slab; each thread has a kernel stack; each process its
// page tables; per-CPU counters of cgroups are percpu).
type kernelMem struct{ slabUnreclaim, slabReclaim, pageTables, kernelStack, percpu int64 }

func readKernelMem(m map[string]int64) kernelMem {
	return kernelMem{m["SUnreclaim"], m["SReclaimable"], m["PageTables"], m["KernelStack"], m["Percpu"]}
}

// perSandbox is k over base, per sandbox, in KiB, as "a / b / c / d / e".
func (k kernelMem) perSandbox(base kernelMem, n int) string {
	per := func(v, b int64) string { return fmt.Sprint((v - b) / int64(max(n, 1)) >> 10) }
	return per(k.slabUnreclaim, base.slabUnreclaim) + " / " + per(k.slabReclaim, base.slabReclaim) + " / " +
		per(k.pageTables, base.pageTables) + " / " + per(k.kernelStack, base.kernelStack) + " / " + per(k.percpu, base.percpu)
}

// hostTasks is the number of threads on the host (/proc/loadavg's
// running/total field), which kernel.pid_max bounds.
func hostTasks() int {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 4 {
		if _, total, ok := strings.Cut(f[3], "/"); ok {
			n, _ := strconv.Atoi(total)
			return n
		}
	}
	return 0
}

// sysctlInt reads a number under /proc/sys (0 if unreadable).
func sysctlInt(path string) int {
	data, err := os.ReadFile(filepath.Join("/proc/sys", path))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}

// fdLimit is a process's soft RLIMIT_NOFILE (/proc/PID/limits).
func fdLimit(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Max open files"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// smapsBreakdown groups one process's /proc/PID/smaps by what is mapped:
// the executable, other files, the Go runtime's anonymous memory (heap
// arenas, goroutine stacks, runtime metadata), the main thread's stack,
// the kernel's vdso pages. Values are PSS in bytes; the number of
// mappings of each kind is counted alongside.
func smapsBreakdown(pid int) (map[string]int64, map[string]int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, nil, err
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	pss, count := map[string]int64{}, map[string]int{}
	kind := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: range perms offset dev inode [path]
			path := ""
			if len(f) >= 6 {
				path = strings.Join(f[5:], " ")
			}
			switch {
			case path == "":
				kind = "anonymous (Go heap arenas, goroutine stacks, runtime metadata)"
			case path == exe || strings.HasSuffix(path, "/sandgate-sandbox") || strings.HasSuffix(path, " (deleted)"):
				kind = "the executable (text, rodata, data, bss)"
			case path == "[stack]":
				kind = "main thread stack"
			case strings.HasPrefix(path, "["):
				kind = "kernel pages (" + path + ")"
			default:
				kind = "other files"
			}
			count[kind]++
			continue
		}
		if f[0] == "Pss:" && len(f) >= 2 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			pss[kind] += kb << 10
		}
	}
	return pss, count, nil
}

// densityHostLimits applies -density-pid-max (restored at cleanup) and
// -density-nofile (this process's limit, which the gateway inherits).
func densityHostLimits(env *suiteEnv) error {
	if n := opts.DensityNoFile; n > 0 {
		lim := syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("-density-nofile %d: %w", n, err)
		}
	}
	if n := opts.DensityPidMax; n > 0 {
		const path = "/proc/sys/kernel/pid_max"
		was, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("-density-pid-max: %w", err)
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
			return fmt.Errorf("-density-pid-max %d: %w", n, err)
		}
		env.cleanup.push(func(context.Context) {
			if err := os.WriteFile(path, was, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "bench: density: kernel.pid_max not restored to %s: %v\n", strings.TrimSpace(string(was)), err)
			}
		})
	}
	return nil
}
