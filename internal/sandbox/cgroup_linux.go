package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/proctree"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// cgroupMount is where the cgroup filesystems are mounted: cgroup v2's
// whole tree, or one directory per v1 hierarchy named by its controllers.
const cgroupMount = "/sys/fs/cgroup"

// cgroupSource is the server's own cgroup: where its sandbox's CPU time
// and memory are charged, whichever process used them, and so what a
// container's statistics are. Cumulative CPU does not lose a process
// that was never reaped by one of the tree, as the /proc sum does.
type cgroupSource struct {
	version       string // sandboxspec.StatsCgroupV2 or StatsCgroupV1
	cpu, cpuField string // the cumulative CPU file; v2: its field (usage_usec)
	memory        string // charged memory, in bytes
	// oom is memory.events (v2) or memory.oom_control (v1): its oom_kill
	// is the processes the OOM killer ended in the cgroup (Linux 4.13 on).
	oom   string
	procs []string // cgroup.procs of every hierarchy read
}

// v2Source reads the cgroup v2 directory dir.
func v2Source(dir string) *cgroupSource {
	return &cgroupSource{version: sandboxspec.StatsCgroupV2,
		cpu: filepath.Join(dir, "cpu.stat"), cpuField: "usage_usec",
		memory: filepath.Join(dir, "memory.current"), oom: filepath.Join(dir, "memory.events"),
		procs: []string{filepath.Join(dir, "cgroup.procs")}}
}

// v1Source reads the cgroup v1 cpuacct and memory directories.
func v1Source(cpuDir, memDir string) *cgroupSource {
	return &cgroupSource{version: sandboxspec.StatsCgroupV1,
		cpu:    filepath.Join(cpuDir, "cpuacct.usage"),
		memory: filepath.Join(memDir, "memory.usage_in_bytes"), oom: filepath.Join(memDir, "memory.oom_control"),
		procs: []string{filepath.Join(cpuDir, "cgroup.procs"), filepath.Join(memDir, "cgroup.procs")}}
}

// cgroupStats measures the server's own cgroup; false when it has none
// the server may take for its sandbox's (ownCgroup). A cgroup found once
// stays the source, so that successive samples of a client compare.
func (s *Server) cgroupStats(me proctree.Proc) (sandboxspec.Stats, bool) {
	src := s.cgroup.Load()
	if src == nil {
		if src = ownCgroup(cgroupMount, me); src == nil {
			return sandboxspec.Stats{}, false
		}
		s.cgroup.Store(src)
	}
	st, err := src.read()
	if err != nil {
		s.log.Debug("read the sandbox's cgroup", "error", err)
		return sandboxspec.Stats{}, false
	}
	return st, true
}

// ownCgroup finds the server's cgroup (/proc/self/cgroup) under mount: v2,
// else v1's cpuacct and memory hierarchies. Each is looked for at its path
// under the mount and, for a container whose cgroups are mounted without
// a cgroup namespace, at the mount's root. It is the sandbox's own when
// the server is PID 1 of its PID namespace (a container's cgroup), or
// when it holds no process but the server and its descendants (the
// process backend's isolated sandbox); a server run in its launcher's
// cgroup (isolation none, a test) has none of its own.
func ownCgroup(mount string, me proctree.Proc) *cgroupSource {
	own := jail.OwnCgroups()
	v2, hasV2 := own[""]
	var found []*cgroupSource
	if hasV2 && exists(filepath.Join(mount, "cgroup.controllers")) {
		for _, dir := range candidates(mount, v2) {
			found = append(found, v2Source(dir))
		}
	} else {
		cpuDirs := v1Dirs(mount, own, "cpuacct")
		memDirs := v1Dirs(mount, own, "memory")
		for i := range min(len(cpuDirs), len(memDirs)) {
			found = append(found, v1Source(cpuDirs[i], memDirs[i]))
		}
	}
	for _, src := range found {
		if _, err := src.read(); err == nil && (me.PID == 1 || src.onlyTree(me)) {
			return src
		}
	}
	return nil
}

// candidates are a cgroup's directory under mount and, when that is not
// the root, the root itself.
func candidates(mount, path string) []string {
	dir := filepath.Join(mount, path)
	if dir == mount {
		return []string{mount}
	}
	return []string{dir, mount}
}

// v1Dirs are the candidates for controller's v1 hierarchy, mounted (or,
// for one mounted with others, linked) at mount/controller.
func v1Dirs(mount string, own map[string]string, controller string) []string {
	p, ok := own[controller]
	if !ok {
		return nil
	}
	return candidates(filepath.Join(mount, controller), p)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// onlyTree reports whether every process of the cgroup is the server or
// one of its descendants.
func (c *cgroupSource) onlyTree(me proctree.Proc) bool {
	tree, err := proctree.Tree(me.PID, me.Start)
	if err != nil {
		return false
	}
	ours := make(map[int]bool, len(tree))
	for _, p := range tree {
		ours[p.PID] = true
	}
	for _, f := range c.procs {
		pids, err := readPIDs(f)
		if err != nil {
			return false
		}
		for _, pid := range pids {
			if !ours[pid] {
				return false
			}
		}
	}
	return true
}

// read reads the cgroup's figures; its processes are those of the CPU
// hierarchy's cgroup.procs.
func (c *cgroupSource) read() (sandboxspec.Stats, error) {
	st := sandboxspec.Stats{Source: c.version}
	cpu, err := readCounter(c.cpu, c.cpuField)
	if err != nil {
		return st, err
	}
	mem, err := readCounter(c.memory, "")
	if err != nil {
		return st, err
	}
	// oom_kill is absent before Linux 4.13: 0, not an error.
	ooms, err := readCounter(c.oom, "oom_kill")
	if err != nil && !errors.Is(err, errNoField) {
		return st, err
	}
	pids, err := readPIDs(c.procs[0])
	if err != nil {
		return st, err
	}
	st.MemoryBytes, st.PIDs, st.OOMKills = int64(mem), len(pids), int64(ooms)
	if c.version == sandboxspec.StatsCgroupV2 {
		st.CPUSeconds = float64(cpu) / 1e6 // usage_usec
	} else {
		st.CPUSeconds = float64(cpu) / 1e9 // cpuacct.usage: nanoseconds
	}
	return st, nil
}

// errNoField: a flat-keyed cgroup file has no line for the field asked.
var errNoField = errors.New("no such field")

// readCounter reads a file holding one number or, with field, the number
// on the line "field N" (cpu.stat, memory.events, memory.oom_control).
func readCounter(path, field string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v := bytes.TrimSpace(data)
	if field != "" {
		v = nil
		for _, line := range bytes.Split(data, []byte("\n")) {
			if f := bytes.Fields(line); len(f) == 2 && string(f[0]) == field {
				v = f[1]
			}
		}
		if v == nil {
			return 0, fmt.Errorf("cgroup counter %s: %s: %w", filepath.Base(path), field, errNoField)
		}
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup counter %s: %w", filepath.Base(path), err)
	}
	return n, nil
}

// readPIDs reads a cgroup.procs file.
func readPIDs(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, errors.New("malformed cgroup.procs")
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
