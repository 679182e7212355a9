package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// outcome is everything one run measured.
type outcome struct {
	cfg        config
	started    time.Time
	loadEnded  time.Time
	probes     []probe
	faults     []fault
	results    []result
	cutShort   []result // destroys cut short by the end of the load
	files      map[fileKey]*fileState
	mismatches []string
	sampler    *sampler
	checks     checks
	tests      map[string]testResult
	cycle      []string // the fault kinds in injection order
	redis      string   // the state store, for the report
	// load is /proc/loadavg's 1-minute figure at the start, highest of the
	// progress lines, and at the end of the load: the machine is shared.
	load [3]float64

	kinds []*kindStat // baseline first, then cycle order
	total windowCounts
}

// windowCounts counts requests that ended in some set of windows.
type windowCounts struct {
	requests, ok, failed int
	ownDestroy           int // failed while a client destroy of the same thread ran: expected
	rerouted             int
	byStatus             map[string]int
	okLatency            []time.Duration
}

func (w *windowCounts) add(r result, ownDestroy bool) {
	if w.byStatus == nil {
		w.byStatus = map[string]int{}
	}
	w.requests++
	if r.rerouted {
		w.rerouted++
	}
	switch {
	case r.ok:
		w.ok++
		w.okLatency = append(w.okLatency, r.end.Sub(r.start))
	case ownDestroy:
		w.ownDestroy++
	default:
		w.failed++
		w.byStatus[r.status]++
	}
}

// kindStat aggregates the windows of one fault kind (or the baseline).
type kindStat struct {
	kind       string
	injected   int
	injectErrs int
	windowTime time.Duration
	counts     windowCounts
	firstRec   []time.Duration // fault -> first success on an affected thread
	fullRec    []time.Duration // fault -> every affected thread succeeded again
	noFailure  int             // faults after which no request failed
	unrecov    int             // affected threads with no success until the end
	dups, lost int
}

// analyze splits the run into windows (from one fault to the next; the
// baseline before the first) and measures each fault's recovery.
func (o *outcome) analyze() {
	sort.Slice(o.results, func(i, j int) bool { return o.results[i].end.Before(o.results[j].end) })
	destroys := map[int][]result{}
	for _, r := range o.results {
		if r.op == opDestroy {
			destroys[r.thread] = append(destroys[r.thread], r)
		}
	}
	ownDestroy := func(r result) bool {
		for _, d := range destroys[r.thread] {
			if d.start.Before(r.end) && d.end.After(r.start) && d.client != r.client {
				return true
			}
		}
		return false
	}
	byKind := map[string]*kindStat{"baseline": {kind: "baseline (no fault yet)"}}
	o.kinds = []*kindStat{byKind["baseline"]}
	for _, k := range o.cycle {
		byKind[k] = &kindStat{kind: k}
		o.kinds = append(o.kinds, byKind[k])
	}
	// window i is [faults[i].at, faults[i+1].at); the baseline precedes faults[0].
	bounds := make([]time.Time, 0, len(o.faults)+1)
	for _, f := range o.faults {
		bounds = append(bounds, f.at)
	}
	bounds = append(bounds, o.loadEnded)
	windowOf := func(t time.Time) int { // -1 = baseline
		return sort.Search(len(bounds), func(i int) bool { return bounds[i].After(t) }) - 1
	}
	statOf := func(w int) *kindStat {
		if w < 0 {
			return byKind["baseline"]
		}
		return byKind[o.faults[min(w, len(o.faults)-1)].kind]
	}
	for _, r := range o.results {
		own := !r.ok && ownDestroy(r)
		statOf(windowOf(r.end)).counts.add(r, own)
		o.total.add(r, own)
	}
	base := byKind["baseline"]
	base.windowTime = o.loadEnded.Sub(o.started)
	if len(o.faults) > 0 {
		base.windowTime = o.faults[0].at.Sub(o.started)
	}
	byThread := map[int][]result{} // ordered by end, as o.results
	for _, r := range o.results {
		byThread[r.thread] = append(byThread[r.thread], r)
	}
	for i, f := range o.faults {
		ks := byKind[f.kind]
		ks.injected++
		ks.windowTime += bounds[i+1].Sub(f.at)
		if f.err != nil {
			ks.injectErrs++
			continue
		}
		o.recovery(ks, f, bounds[i+1], byThread, ownDestroy)
	}
	for _, d := range o.checks.duplicates {
		statOf(windowOf(d.at)).dups++
	}
	for _, g := range o.checks.vanished {
		statOf(windowOf(g.goneBy)).lost++
	}
}

// recovery measures one fault: its affected threads are, for a sandbox
// kill, the thread whose sandbox died; otherwise every thread with a
// request that failed in the fault's window. Each recovers at the end of
// its first successful request that started after the fault (and after its
// own first failure).
func (o *outcome) recovery(ks *kindStat, f fault, until time.Time, byThread map[int][]result, ownDestroy func(result) bool) {
	firstFail := map[int]time.Time{}
	if f.kind == faultSandbox {
		for i := range o.cfg.Threads {
			if threadName(i) == f.thread {
				firstFail[i] = f.at
			}
		}
	}
	for _, r := range o.results {
		if r.ok || r.end.Before(f.at) || !r.end.Before(until) || ownDestroy(r) {
			continue
		}
		if t, seen := firstFail[r.thread]; !seen || r.start.Before(t) {
			firstFail[r.thread] = r.start
		}
	}
	if len(firstFail) == 0 || (f.kind == faultSandbox && !o.anyFailure(f, until, ownDestroy)) {
		ks.noFailure++
	}
	var first, full time.Duration = -1, 0
	for th, failed := range firstFail {
		at := time.Time{}
		for _, r := range byThread[th] {
			if r.ok && !r.start.Before(failed) && !r.start.Before(f.at) {
				at = r.end // the first: byThread is ordered by end
				break
			}
		}
		if at.IsZero() {
			ks.unrecov++
			continue
		}
		d := at.Sub(f.at)
		if first < 0 || d < first {
			first = d
		}
		full = max(full, d)
	}
	if first >= 0 {
		ks.firstRec = append(ks.firstRec, first)
		ks.fullRec = append(ks.fullRec, full)
	}
}

// anyFailure: did any request on the killed sandbox's thread fail?
func (o *outcome) anyFailure(f fault, until time.Time, ownDestroy func(result) bool) bool {
	for _, r := range o.results {
		if !r.ok && threadName(r.thread) == f.thread && !r.end.Before(f.at) && r.end.Before(until) && !ownDestroy(r) {
			return true
		}
	}
	return false
}

func (o *outcome) duplicates() int { return len(o.checks.duplicates) }
func (o *outcome) lost() int       { return o.checks.lost() }

func (o *outcome) probeFailures() []string {
	var out []string
	for _, p := range o.probes {
		if !p.pass && !p.skipped {
			out = append(out, p.name+": "+p.got)
		}
	}
	return out
}

// passed: nothing lost, nothing duplicated, every thread answers at the
// end, every bad input got its status, and the load actually ran.
func (o *outcome) passed() bool { return o.verdict() == "" }

func (o *outcome) verdict() string {
	var why []string
	if n := o.lost(); n > 0 {
		why = append(why, fmt.Sprintf("%d sandboxes or files lost", n))
	}
	if n := o.duplicates(); n > 0 {
		why = append(why, fmt.Sprintf("%d duplicated sandboxes", n))
	}
	if n := len(o.checks.finalFailures); n > 0 {
		why = append(why, fmt.Sprintf("%d threads not answering at the end", n))
	}
	if p := o.probeFailures(); len(p) > 0 {
		why = append(why, "bad input answered wrongly: "+strings.Join(p, "; "))
	}
	if o.total.ok == 0 || o.sampler.samples == 0 {
		why = append(why, "no successful request or no /proc sample: the run measured nothing")
	}
	return strings.Join(why, "; ")
}

// print writes the summary to the terminal.
func (o *outcome) print(w io.Writer) {
	k := &o.checks
	fmt.Fprintf(w, "\n== soak: %d clients, %d threads, %d replicas, %s load, a fault every %s\n",
		o.cfg.Clients, o.cfg.Threads, o.cfg.Replicas, o.loadEnded.Sub(o.started).Round(time.Second), o.cfg.FaultEvery)
	fmt.Fprintf(w, "requests %d: ok %d, failed %d, failed during the client's own destroy of the thread %d, rerouted from a down replica %d\n",
		o.total.requests, o.total.ok, o.total.failed, o.total.ownDestroy, o.total.rerouted)
	for _, ks := range o.kinds {
		fmt.Fprintf(w, "  %-30s injected %2d  requests %6d  failed %5d  %s\n", ks.kind, ks.injected, ks.counts.requests, ks.counts.failed, statusList(ks.counts.byStatus, 4))
		if len(ks.firstRec) > 0 || ks.noFailure > 0 {
			fmt.Fprintf(w, "  %-30s recovery first %s, all affected threads %s; no failure after %d; unrecovered threads %d\n",
				"", spread(ks.firstRec), spread(ks.fullRec), ks.noFailure, ks.unrecov)
		}
	}
	fmt.Fprintf(w, "samples of /proc %d (max live sandboxes %d); duplicates %d; lost %d (vanished %d, untracked %d, unrecorded %d, files %d, read-back %d)\n",
		o.sampler.samples, o.sampler.maxLive, o.duplicates(), o.lost(), len(k.vanished), len(k.untracked), len(k.unrecorded), len(k.lostFiles), len(k.mismatches))
	fmt.Fprintf(w, "files checked %d (%d through a gateway); stale records %d; threads answering at the end %d/%d (%d after a retry)\n",
		k.filesChecked, k.apiReads, k.staleRecords, k.finalOK, o.cfg.Threads, k.finalRetried)
	var vanished []string
	for _, g := range k.vanished {
		vanished = append(vanished, g.String())
	}
	for _, list := range [][]string{vanished, k.untracked, k.unrecorded, k.lostFiles, k.mismatches, k.finalFailures, o.probeFailures()} {
		for i, s := range list {
			if i == 10 {
				fmt.Fprintf(w, "  ... %d more\n", len(list)-10)
				break
			}
			fmt.Fprintln(w, "  ! "+s)
		}
	}
	for _, d := range k.duplicates {
		fmt.Fprintln(w, "  ! duplicate "+d.String())
	}
	if v := o.verdict(); v != "" {
		fmt.Fprintln(w, "FAIL:", v)
	} else {
		fmt.Fprintln(w, "PASS: no sandbox lost or duplicated")
	}
}

// statusList is "503 state_unavailable ×12, conn reset ×3" (most first).
func statusList(m map[string]int, limit int) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for i, k := range keys {
		if i == limit {
			parts = append(parts, fmt.Sprintf("+%d more", len(keys)-limit))
			break
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// spread is "median 1.2s, max 3.4s" of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %s, max %s", round(s[len(s)/2]), round(s[len(s)-1]))
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
