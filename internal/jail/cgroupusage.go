package jail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Usage is a sandbox's resource use as its cgroups account it.
type Usage struct {
	// CPU is the cumulative CPU time of every process ever in the cgroup;
	// HasCPU is false with a v1 sandbox that has no cpuacct cgroup (no
	// cpuacct hierarchy the gateway may write, or placed before sandboxes
	// got one): the caller sums its processes' instead (Procs).
	CPU    time.Duration
	HasCPU bool
	// Memory is what the cgroup charges now (anonymous and page cache);
	// MemoryPeak its high-water mark (0: the kernel keeps none, cgroup v2
	// before Linux 5.19); MemoryLimit its limit (0: none).
	Memory, MemoryPeak, MemoryLimit int64
	PIDs                            int
	// OOMKills counts the processes the OOM killer ended in the cgroup
	// (memory.events, or v1's memory.oom_control: Linux 4.13 on; 0 before).
	OOMKills int64
}

// Usage reads name's cgroup files once (a few small reads, no process
// walk). ok is false when the sandbox has no cgroup (CgroupNone, or placed
// before cgroups).
func (c *Cgroups) Usage(name string) (u Usage, ok bool, err error) {
	h, ok, err := c.OpenUsage(name)
	if !ok || err != nil {
		return Usage{}, ok, err
	}
	defer h.Close()
	u, err = h.Read()
	return u, err == nil, err
}

// OpenUsage opens name's cgroup files for repeated reads; ok is false with
// no cgroups, or when the sandbox has no cgroup (Usage then).
func (c *Cgroups) OpenUsage(name string) (u *UsageFiles, ok bool, err error) {
	if c.Mode() == CgroupNone || !validName(name) {
		return nil, false, nil
	}
	if c.mode == CgroupV2 {
		u, err = OpenUsageV2(c.dir(c.dirs[0].path, name))
	} else {
		cpuDir := ""
		if c.cpuacct != "" {
			cpuDir = c.dir(c.cpuacct, name)
		}
		u, err = openUsageV1(c.dir(c.dirs[0].path, name), c.dir(c.dirs[1].path, name), cpuDir)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return u, err == nil, err
}

// UsageFiles holds a sandbox's cgroup accounting files open, so a sampler
// reading them every second pays one pread each (cgroup files are
// generated afresh by a read at offset 0) instead of open, read and close:
// measured 3 to 7 times cheaper (go run ./bench -suite sampler). Not safe
// for concurrent use.
type UsageFiles struct {
	v1 bool
	// cpu is cpu.stat (v2) or cpuacct.usage (v1), nil for a v1 sandbox
	// without a cpuacct cgroup; peak nil: the kernel keeps none. events
	// is memory.events (v2) or memory.oom_control (v1).
	cpu, mem, peak, max, pids, events *os.File
	// procs is, for a v1 sandbox without cpuacct, its memory cgroup.procs
	// (Procs), opened for each read: v1 keeps the pid list it built for an
	// open file and hands it out again while it is read within a second,
	// so a held file misses the processes started since (a sandbox's CPU
	// hog read as 0 %). cpuacct.usage is a plain counter: held open.
	procs string
	buf   [512]byte
	// reads counts Read calls; the limit, the peak and the OOM-kill count
	// (slow) are read afresh on every usageSlowEvery-th, the first
	// included, and kept in between.
	reads int
	slow  Usage
}

// usageSlowEvery spaces the reads of what a sampler needs less often than
// every second: the memory limit (set at placement), the peak and the
// OOM-kill count (an event a few seconds late). Three preads a sample
// instead of six halve the sampler's cost (bench -suite sampler).
const usageSlowEvery = 5

type usageFile struct {
	path     string
	to       **os.File
	optional bool
}

// OpenUsageV2 opens dir's cpu.stat (usage_usec is there even with the cpu
// controller off), memory.current, memory.peak (optional: Linux 5.19 on),
// memory.max, pids.current and memory.events (its oom_kill count).
func OpenUsageV2(dir string) (*UsageFiles, error) {
	u := &UsageFiles{}
	return u, u.open([]usageFile{{filepath.Join(dir, "cpu.stat"), &u.cpu, false},
		{filepath.Join(dir, "memory.current"), &u.mem, false}, {filepath.Join(dir, "memory.peak"), &u.peak, true},
		{filepath.Join(dir, "memory.max"), &u.max, false}, {filepath.Join(dir, "pids.current"), &u.pids, false},
		{filepath.Join(dir, "memory.events"), &u.events, false}})
}

// openUsageV1 opens the v1 memory cgroup's usage, max usage, limit and
// oom_control, the pids cgroup's pids.current and, when cpuDir is not ""
// and the sandbox has it (not one placed before sandboxes got a cpuacct
// cgroup), its cpuacct.usage; without that Procs lists the memory
// cgroup's processes.
func openUsageV1(memDir, pidsDir, cpuDir string) (*UsageFiles, error) {
	u := &UsageFiles{v1: true}
	files := []usageFile{{filepath.Join(memDir, "memory.usage_in_bytes"), &u.mem, false},
		{filepath.Join(memDir, "memory.max_usage_in_bytes"), &u.peak, false},
		{filepath.Join(memDir, "memory.limit_in_bytes"), &u.max, false},
		{filepath.Join(memDir, "memory.oom_control"), &u.events, false},
		{filepath.Join(pidsDir, "pids.current"), &u.pids, false}}
	if cpuDir != "" {
		files = append(files, usageFile{filepath.Join(cpuDir, "cpuacct.usage"), &u.cpu, true})
	}
	if err := u.open(files); err != nil {
		return u, err
	}
	if u.cpu == nil {
		u.procs = filepath.Join(memDir, "cgroup.procs")
	}
	return u, nil
}

func (u *UsageFiles) open(files []usageFile) error {
	for _, f := range files {
		fh, err := os.Open(f.path)
		if f.optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			u.Close()
			return err
		}
		*f.to = fh
	}
	return nil
}

// Close closes the files.
func (u *UsageFiles) Close() {
	for _, f := range []*os.File{u.cpu, u.mem, u.peak, u.max, u.pids, u.events} {
		if f != nil {
			f.Close()
		}
	}
}

// Read reads the current figures.
func (u *UsageFiles) Read() (Usage, error) {
	var out Usage
	if u.cpu != nil && u.v1 {
		ns, err := u.int(u.cpu) // cpuacct.usage: nanoseconds
		if err != nil {
			return out, err
		}
		out.CPU, out.HasCPU = time.Duration(ns), true
	} else if u.cpu != nil {
		stat, err := u.pread(u.cpu)
		if err != nil {
			return out, err
		}
		usec, ok := statField(stat, "usage_usec")
		if !ok {
			return out, errors.New("cgroup: cpu.stat has no usage_usec")
		}
		out.CPU, out.HasCPU = time.Duration(usec)*time.Microsecond, true
	}
	var err error
	if out.Memory, err = u.int(u.mem); err != nil {
		return out, err
	}
	pids, err := u.int(u.pids)
	if err != nil {
		return out, err
	}
	out.PIDs = int(pids)
	if u.reads%usageSlowEvery == 0 {
		if err := u.readSlow(); err != nil {
			return out, err
		}
	}
	u.reads++
	if u.peak != nil { // the peak is at least what is in use now, read or not
		u.slow.MemoryPeak = max(u.slow.MemoryPeak, out.Memory)
	}
	out.MemoryPeak, out.MemoryLimit, out.OOMKills = u.slow.MemoryPeak, u.slow.MemoryLimit, u.slow.OOMKills
	return out, nil
}

// readSlow reads the limit, the peak and the OOM-kill count into u.slow.
func (u *UsageFiles) readSlow() error {
	var err error
	if u.peak != nil {
		if u.slow.MemoryPeak, err = u.int(u.peak); err != nil {
			return err
		}
	}
	if u.slow.MemoryLimit, err = u.int(u.max); err != nil {
		return err
	}
	if u.v1 && u.slow.MemoryLimit >= 1<<62 { // v1 spells "no limit" as a huge page-aligned number
		u.slow.MemoryLimit = 0
	}
	// oom_kill is absent before Linux 4.13: 0, not an error.
	ev, err := u.pread(u.events)
	u.slow.OOMKills, _ = statField(ev, "oom_kill")
	return err
}

// Procs appends to pids the processes in the memory cgroup of a v1
// sandbox without a cpuacct cgroup, whose CPU times its caller sums: every
// process of the sandbox, a daemon that left its tree too, without a walk
// of every process on the host. Otherwise it appends none (Read has the
// CPU).
func (u *UsageFiles) Procs(pids []int) ([]int, error) {
	if u.procs == "" {
		return pids, nil
	}
	f, err := os.Open(u.procs)
	if err != nil {
		return pids, fmt.Errorf("cgroup: %w", err)
	}
	defer f.Close()
	var rest []byte // a pid cut by the end of the buffer
	for {
		n, err := f.Read(u.buf[:])
		b := append(rest, u.buf[:n]...)
		for {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				break
			}
			pid, perr := strconv.Atoi(string(b[:i]))
			if perr != nil {
				return pids, fmt.Errorf("cgroup: cgroup.procs: %w", perr)
			}
			pids, b = append(pids, pid), b[i+1:]
		}
		rest = append(rest[:0], b...)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return pids, nil
		}
		if err != nil {
			return pids, fmt.Errorf("cgroup: read cgroup.procs: %w", err)
		}
	}
}

func (u *UsageFiles) pread(f *os.File) ([]byte, error) {
	n, err := f.ReadAt(u.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("cgroup: read %s: %w", filepath.Base(f.Name()), err)
	}
	return u.buf[:n], nil
}

func (u *UsageFiles) int(f *os.File) (int64, error) {
	b, err := u.pread(f)
	if err != nil {
		return 0, err
	}
	return parseCgroupInt(b, f.Name())
}

// parseCgroupInt parses a file holding one number; "max" is 0 (no limit).
func parseCgroupInt(b []byte, path string) (int64, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %s: %w", filepath.Base(path), err)
	}
	return v, nil
}

// statField finds "key value" in a flat-keyed file such as cpu.stat.
func statField(b []byte, key string) (int64, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if ok && string(k) == key {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
