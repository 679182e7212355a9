package main

import "fmt"

// Issue 38's goals: a mixed workload of new threads over four templates
// sharing one prewarm pool (templates suite).
const (
	goalTplClaimPct = 95.0 // share of new threads given a pre-started sandbox of their template
	goalTplFirstP50 = 10.0 // their create (PUT /threads/{t}/sandbox), p50
)

func goalTplClaim(rs map[string]Result) []string {
	goal := fmt.Sprintf("claim rate ≥ %g %%, new threads over 4 templates sharing one prewarm pool", goalTplClaimPct)
	v, r, ok := figs(rs, "templates", figTplClaimPct)
	if !ok {
		return notMeasured(goal, "templates")
	}
	verdict := "met"
	if v[0] < goalTplClaimPct {
		verdict = fmt.Sprintf("missed by %.1f points", goalTplClaimPct-v[0])
	}
	why := fmt.Sprintf("%d rounds (seeds %v) of new threads arriving at random (exponential, mean %s), templates weighted %s, "+
		"`--prewarm %d`, each template at least 1, the rest by recent claims; a miss is a cold create (see the templates section)",
		len(tplMixSeeds), tplMixSeeds, tplMeanArrival, tplWeights(), tplPrewarmTotal)
	return []string{goal, fmt.Sprintf("%.1f %% claimed", v[0]), verdict, why, runLabel(r)}
}

func goalTplFirst(rs map[string]Result) []string {
	goal := fmt.Sprintf("first request (create) of a new thread < %g ms p50, mixed templates", goalTplFirstP50)
	v, r, ok := figs(rs, "templates", figTplFirstP50, figTplFirstP99, figTplColdImageP50)
	if !ok {
		return notMeasured(goal, "templates")
	}
	measured := fmt.Sprintf("p50 %.2f ms, p99 %.2f ms (cold create of the Python template: p50 %.2f ms)", v[0], v[1], v[2])
	why := "PUT /threads/{t}/sandbox {\"template\"} through the gateway, timed from each thread's arrival, threads overlapping " +
		"when arrivals bunch; the claim itself is the prewarmed first request of the lifecycle suite"
	return []string{goal, measured, msVerdict(v[0], goalTplFirstP50), why, runLabel(r)}
}
