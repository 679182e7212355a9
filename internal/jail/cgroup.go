package jail

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups puts sandboxes into cgroups of their own that bound their memory
// and process count, with cgroup v2 or v1, whichever the gateway can use,
// and that can freeze them (CanFreeze). The zero value and a nil *Cgroups
// mean none: Place and Remove do nothing, and the caller bounds memory by
// RLIMIT_AS instead.
type Cgroups struct {
	mode string
	dirs []cgroupDir
	// freezer is the parent of the sandboxes' cgroups that freeze: the v2
	// parent (cgroup.freeze) or, with v1, the parent in the freezer
	// hierarchy (freezer.state); "" = none.
	freezer string
	// cpuacct is, with v1, the sandboxes' parent in the cpuacct hierarchy
	// (cpu,cpuacct where the two are mounted together): a sandbox's CPU is
	// then one read of its cpuacct.usage rather than a /proc/PID/stat read
	// per process; "" = none (v2 has cpu.stat in every cgroup).
	cpuacct string
	// scope sets apart the cgroups of one Cgroups user (a process
	// backend's state dir) from another's on the same host: sandbox ids
	// are derived from user and thread, so two fleets serving the same
	// thread would otherwise share one cgroup, its limits and its freezer,
	// and neither could remove it while the other's process is in it.
	scope string
}

// WithScope returns c whose sandboxes' cgroups are named name-scope;
// a sandbox placed without a scope (before an upgrade) keeps its
// unscoped cgroup, which Remove, Freeze and Frozen still find.
func (c *Cgroups) WithScope(scope string) *Cgroups {
	if c == nil {
		return nil
	}
	s := *c
	s.scope = scope
	return &s
}

// placeDir is name's cgroup under parent, as Place makes it.
func (c *Cgroups) placeDir(parent, name string) string {
	if c.scope == "" {
		return filepath.Join(parent, name)
	}
	return filepath.Join(parent, name+"-"+c.scope)
}

// dir is name's cgroup under parent: the scoped one, or the unscoped one a
// sandbox placed before scopes has.
func (c *Cgroups) dir(parent, name string) string {
	scoped := c.placeDir(parent, name)
	if legacy := filepath.Join(parent, name); scoped != legacy && !isDir(scoped) && isDir(legacy) {
		return legacy
	}
	return scoped
}

// cgroupDir is a parent under which each sandbox gets a directory, and the
// limit files written there.
type cgroupDir struct {
	path   string
	limits []limitFile
}

// limitFile is a cgroup control file and its value for a sandbox's Limits;
// an optional one is skipped when the kernel does not offer it (swap
// accounting off).
type limitFile struct {
	name     string
	value    func(Limits) string
	optional bool
}

// Modes Cgroups.Mode reports.
const (
	CgroupV2   = "cgroup v2"
	CgroupV1   = "cgroup v1"
	CgroupNone = "none"
)

// cgroupParent is the directory under which the sandboxes' cgroups go.
const cgroupParent = "sandgate"

// OpenCgroups finds out how sandboxes can be bounded under root (normally
// /sys/fs/cgroup). cgroup v2 when root is a v2 hierarchy (cgroup.controllers
// there) with memory and pids, which it enables for root's children and for
// <root>/sandgate, which it creates. Else cgroup v1 when root/memory and
// root/pids are v1 hierarchies: sandboxes go under sandgate in the gateway's
// own cgroup there (so limits on the gateway's cgroup cover its sandboxes
// too), or at the top when that is not visible under root; and into the
// root/freezer and root/cpuacct hierarchies the same way, each when there is
// one the gateway may write. Else none.
func OpenCgroups(root string) *Cgroups {
	if dir, err := openV2(root); err == nil {
		c := &Cgroups{mode: CgroupV2, dirs: []cgroupDir{dir}}
		if _, err := os.Stat(filepath.Join(dir.path, "cgroup.freeze")); err == nil { // Linux 5.2 on
			c.freezer = dir.path
		}
		return c
	}
	if dirs, err := openV1(root); err == nil {
		c := &Cgroups{mode: CgroupV1, dirs: dirs}
		if dir, err := openV1Optional(root, "freezer", "cgroup.procs"); err == nil {
			c.dirs = append(c.dirs, dir)
			c.freezer = dir.path
		}
		if dir, err := openV1Optional(root, "cpuacct", "cpuacct.usage"); err == nil {
			c.dirs = append(c.dirs, dir)
			c.cpuacct = dir.path
		}
		return c
	}
	return &Cgroups{mode: CgroupNone}
}

func openV2(root string) (cgroupDir, error) {
	controllers, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return cgroupDir{}, err
	}
	if !hasFields(string(controllers), "memory", "pids") {
		return cgroupDir{}, errors.New("memory or pids controller missing")
	}
	if err := writeControl(root, "cgroup.subtree_control", "+memory +pids"); err != nil {
		return cgroupDir{}, err
	}
	parent := filepath.Join(root, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return cgroupDir{}, err
	}
	if err := writeControl(parent, "cgroup.subtree_control", "+memory +pids"); err != nil {
		return cgroupDir{}, err
	}
	return cgroupDir{path: parent, limits: []limitFile{
		{name: "memory.max", value: func(l Limits) string { return limitValue(l.Memory, "max") }},
		{name: "memory.swap.max", value: func(Limits) string { return "0" }, optional: true},
		{name: "pids.max", value: pidsMax},
	}}, nil
}

func openV1(root string) ([]cgroupDir, error) {
	own := OwnCgroups()
	memory := []limitFile{
		{name: "memory.limit_in_bytes", value: func(l Limits) string { return limitValue(l.Memory, "-1") }},
		// Memory plus swap, so swapping out cannot dodge the limit.
		{name: "memory.memsw.limit_in_bytes", value: func(l Limits) string { return limitValue(l.Memory, "-1") }, optional: true},
	}
	pids := []limitFile{{name: "pids.max", value: pidsMax}}
	var dirs []cgroupDir
	for _, c := range []struct {
		controller, probe string
		limits            []limitFile
	}{{"memory", "memory.limit_in_bytes", memory}, {"pids", "cgroup.procs", pids}} {
		hierarchy := filepath.Join(root, c.controller)
		if _, err := os.Stat(filepath.Join(hierarchy, c.probe)); err != nil {
			return nil, err
		}
		if dir := filepath.Join(hierarchy, own[c.controller]); own[c.controller] != "" && isDir(dir) {
			hierarchy = dir
		}
		parent := filepath.Join(hierarchy, cgroupParent)
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		dirs = append(dirs, cgroupDir{path: parent, limits: c.limits})
	}
	return dirs, nil
}

// openV1Optional makes the sandboxes' parent in the v1 hierarchy of
// controller (probe: a file its root has), beside openV1's: optional, as a
// host may not mount it or let the gateway write it. Without the freezer
// the process backend freezes by signals; without cpuacct it sums the CPU
// of the processes in the sandbox's memory cgroup.
func openV1Optional(root, controller, probe string) (cgroupDir, error) {
	hierarchy := filepath.Join(root, controller)
	if _, err := os.Stat(filepath.Join(hierarchy, probe)); err != nil {
		return cgroupDir{}, err
	}
	if own := OwnCgroups()[controller]; own != "" && isDir(filepath.Join(hierarchy, own)) {
		hierarchy = filepath.Join(hierarchy, own)
	}
	parent := filepath.Join(hierarchy, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return cgroupDir{}, err
	}
	// A parent made before, in a hierarchy mounted read-only since (a
	// container's): mkdir says it exists, and every sandbox's Place
	// would fail.
	if err := unix.Access(parent, unix.W_OK); err != nil {
		return cgroupDir{}, fmt.Errorf("cgroup: %s: %w", parent, err)
	}
	return cgroupDir{path: parent}, nil
}

// OwnCgroups maps each v1 controller to this process's cgroup path in it,
// from /proc/self/cgroup ("4:memory:/a/b"); "" maps to its cgroup v2 path
// ("0::/a/b"), if any.
func OwnCgroups() map[string]string {
	own := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return own
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own
}

// CPUFrom says where a sandbox's CPU time comes from, for the start-up
// log: its cgroup's one counter (v2's cpu.stat, v1's cpuacct.usage), or
// the /proc/PID/stat of each of its processes (v1 without a cpuacct
// hierarchy the gateway may write; no cgroups).
func (c *Cgroups) CPUFrom() string {
	switch {
	case c.Mode() == CgroupV2:
		return "cgroup v2 cpu.stat"
	case c.CountsCPU():
		return "cgroup v1 cpuacct.usage"
	case c.Mode() == CgroupV1:
		return "/proc of the processes in its memory cgroup"
	}
	return "/proc of its process tree"
}

// CountsCPU reports whether sandboxes placed from now on get a cgroup
// that counts their CPU time: cgroup v2, or v1 with a cpuacct hierarchy.
func (c *Cgroups) CountsCPU() bool {
	return c.Mode() == CgroupV2 || (c.Mode() == CgroupV1 && c.cpuacct != "")
}

// Mode is CgroupV2, CgroupV1 or CgroupNone.
func (c *Cgroups) Mode() string {
	if c == nil || c.mode == "" {
		return CgroupNone
	}
	return c.mode
}

// validName: a sandbox id, never a path: 1 to 128 of [A-Za-z0-9_-]. Not a
// regexp: compiling {1,128} at package init cost every sandbox start
// (this package is in the sandbox binary) milliseconds.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Place creates the sandbox's cgroups, writes l's memory and process
// limits (l with defaults applied) and moves pid into them. Only processes
// pid starts afterwards are inside: place it before it starts any. On
// error it removes what it created.
func (c *Cgroups) Place(name string, pid int, l Limits) error {
	if c.Mode() == CgroupNone {
		return nil
	}
	if !validName(name) {
		return fmt.Errorf("cgroup: invalid sandbox name %q", name)
	}
	err := c.place(name, pid, l)
	if err != nil {
		_ = c.Remove(name)
	}
	return err
}

func (c *Cgroups) place(name string, pid int, l Limits) error {
	for _, d := range c.dirs {
		dir := c.placeDir(d.path, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		for _, f := range d.limits {
			err := writeControl(dir, f.name, f.value(l))
			if f.optional && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
		}
		if err := writeControl(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes the sandbox's cgroups. A cgroup cannot go while it holds
// processes, so it retries for a few seconds while they die; one that does
// not exist is no error.
func (c *Cgroups) Remove(name string) error {
	if c.Mode() == CgroupNone {
		return nil
	}
	if !validName(name) {
		return fmt.Errorf("cgroup: invalid sandbox name %q", name)
	}
	var errs []error
	for _, d := range c.dirs {
		errs = append(errs, removeCgroup(c.dir(d.path, name)))
	}
	return errors.Join(errs...)
}

func removeCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		// rmdir, with the control files in it: they go with it.
		err := os.Remove(dir)
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist):
			return nil
		case errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
		default:
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
	}
}

// ErrNoFreezer: the sandbox has no cgroup that freezes (no freezer on this
// machine, or a sandbox placed before there was one).
var ErrNoFreezer = errors.New("cgroup: no freezer for this sandbox")

// CanFreeze reports whether sandboxes placed from now on get a cgroup that
// Freeze can freeze: cgroup v2, or v1 with a freezer hierarchy.
func (c *Cgroups) CanFreeze() bool { return c != nil && c.freezer != "" }

// freezeFiles names the freezer's control file, the value that freezes
// (frozen) or thaws, and the file and line that report it done.
func (c *Cgroups) freezeFiles(frozen bool) (control, value, report, done string) {
	if c.mode == CgroupV2 {
		// cgroup.events says "frozen 1" once every task is frozen.
		if frozen {
			return "cgroup.freeze", "1", "cgroup.events", "frozen 1"
		}
		return "cgroup.freeze", "0", "cgroup.events", "frozen 0"
	}
	// v1's freezer.state reads FREEZING until every task is frozen.
	if frozen {
		return "freezer.state", "FROZEN", "freezer.state", "FROZEN"
	}
	return "freezer.state", "THAWED", "freezer.state", "THAWED"
}

// freezeDir is the sandbox's freezing cgroup, or ErrNoFreezer.
func (c *Cgroups) freezeDir(name string) (string, error) {
	if !c.CanFreeze() {
		return "", ErrNoFreezer
	}
	if !validName(name) {
		return "", fmt.Errorf("cgroup: invalid sandbox name %q", name)
	}
	dir := c.dir(c.freezer, name)
	if !isDir(dir) {
		return "", ErrNoFreezer
	}
	return dir, nil
}

// Freeze freezes (frozen) or thaws the sandbox's cgroup, and waits until
// the kernel reports every task in it frozen or thawed. A frozen task
// keeps its memory and uses no CPU. Freezing what is frozen and thawing
// what runs succeed. Should ctx end before a freeze is done, the cgroup is
// thawed again: a sandbox is left either frozen or running. ErrNoFreezer
// when the sandbox has no freezing cgroup.
func (c *Cgroups) Freeze(ctx context.Context, name string, frozen bool) error {
	dir, err := c.freezeDir(name)
	if err != nil {
		return err
	}
	control, value, report, done := c.freezeFiles(frozen)
	if err := writeControl(dir, control, value); err != nil {
		return err
	}
	err = waitControl(ctx, dir, report, done)
	if err != nil && frozen {
		_, thaw, _, _ := c.freezeFiles(false)
		_ = writeControl(dir, control, thaw)
	}
	return err
}

// spinFor is how long Poll checks back to back before it sleeps between
// checks: a freeze or a stop is done in tens to hundreds of microseconds,
// and a Go timer wakes no sooner than about a millisecond.
const spinFor = time.Millisecond

// Poll calls done until it is true, fails, or ctx ends (ctx's error):
// back to back for spinFor, then 1 to 5 ms apart. Freezing a cgroup and
// stopping a process tree both wait with it.
func Poll(ctx context.Context, done func() (bool, error)) error {
	began := time.Now()
	for interval := time.Millisecond; ; {
		if ok, err := done(); ok || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(began) < spinFor {
			runtime.Gosched()
			continue
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		interval = min(interval*2, 5*time.Millisecond)
	}
}

// waitControl polls a control file until it holds line (a whole line of
// it) or ctx ends.
func waitControl(ctx context.Context, dir, name, line string) error {
	path := filepath.Join(dir, name)
	err := Poll(ctx, func() (bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, fmt.Errorf("cgroup: %w", err)
		}
		return slices.Contains(strings.Split(strings.TrimSpace(string(data)), "\n"), line), nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("cgroup: wait for %q in %s: %w", line, path, err)
	}
	return err
}

// Frozen reports whether the sandbox's cgroup is frozen or being frozen
// (asked to freeze, not yet done); ErrNoFreezer when it has none.
func (c *Cgroups) Frozen(name string) (bool, error) {
	dir, err := c.freezeDir(name)
	if err != nil {
		return false, err
	}
	control, thawed, _, _ := c.freezeFiles(false)
	data, err := os.ReadFile(filepath.Join(dir, control))
	if err != nil {
		return false, fmt.Errorf("cgroup: %w", err)
	}
	return strings.TrimSpace(string(data)) != thawed, nil
}

// writeControl writes value to a cgroup control file, which must exist:
// never create one.
func writeControl(dir, name, value string) error {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, path, err)
	}
	return nil
}

func limitValue(v int64, unlimited string) string {
	if v < 0 {
		return unlimited
	}
	return strconv.FormatInt(v, 10)
}

func pidsMax(l Limits) string { return limitValue(l.sandboxProcesses(), "max") }

func hasFields(s string, want ...string) bool {
	fields := strings.Fields(s)
	for _, w := range want {
		if !slices.Contains(fields, w) {
			return false
		}
	}
	return true
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
