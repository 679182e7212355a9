// Package proctree finds, stops and continues trees of processes: the
// process backend pauses a sandbox from the host with it, and the sandbox
// server pauses itself with it where its backend has no freezer of its
// own (Kubernetes). The server links it, so it stays lean: the standard
// library and golang.org/x/sys only. The reading of /proc, the stopping
// and the continuing are Linux's; off Linux only the types and the tree
// walk over a listing (ps's) are here.
package proctree

// Proc is one process: its identity (pid plus start time, so a recycled
// pid is told apart), its place in the tree and its group, its state and,
// read from /proc, its resource use.
type Proc struct {
	PID, PPID, PGID int
	Start           string // start time after boot, opaque: compared, never parsed
	Dead            bool   // zombie or exiting: gone for every purpose here
	Stopped         bool   // stopped by a signal (state T)
	CPUTicks        uint64 // utime + stime, in ClockTicks (Linux)
	ChildTicks      uint64 // cutime + cstime: of its children it waited for (Linux)
	RSSPages        int64  // resident set (Linux)
}

// Set is processes by pid, each with the start time it had when it was
// put in: what Stop stopped, so that Continue continues those and never a
// process that took a freed pid since.
type Set map[int]string

// Descendants is the tree under root in the listing all (root excluded),
// parents before their children.
func Descendants(all []Proc, root int) []Proc {
	children := make(map[int][]Proc, len(all))
	for _, p := range all {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []Proc
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}
