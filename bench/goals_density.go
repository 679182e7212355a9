package main

import "fmt"

// Issue 42's density goal: live isolated sandboxes on this machine, each
// answering through the gateway during a sweep over all of them.
const goalDensityLive = 5000

func goalDensity(rs map[string]Result) []string {
	goal := fmt.Sprintf("≥ %d live isolated sandboxes, sweep p99 ≤ %s ms through the gateway", goalDensityLive, ms(densityGoalP99))
	v, r, ok := figs(rs, "density", figDensityLive, figDensityKeepP99, figDensityFreshP99, figDensityPSS)
	if !ok {
		return notMeasured(goal, "density")
	}
	measured := fmt.Sprintf("%.0f live, p99 %.2f ms kept-alive / %.2f ms new connection, %.2f MiB PSS each", v[0], v[1], v[2], v[3]/(1<<20))
	verdict := "met"
	switch {
	case v[0] < goalDensityLive:
		verdict = fmt.Sprintf("missed: %.0f of %d", v[0], goalDensityLive)
	case max(v[1], v[2]) > msF(densityGoalP99):
		verdict = fmt.Sprintf("missed by %.2f ms", max(v[1], v[2])-msF(densityGoalP99))
	}
	why := "the run's bound or the limit that stopped it is the density section's first note"
	if len(r.Notes) > 0 {
		why = r.Notes[0]
	}
	return []string{goal, measured, verdict, why, runLabel(r)}
}
