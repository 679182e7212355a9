package main

import "fmt"

// Issue 23's goals: thaw on request (freeze suite) and a checkpoint where
// copy-on-write exists (checkpoint suite).

func goalThaw(rs map[string]Result) []string {
	goal := fmt.Sprintf("thaw on request p99 < %g ms (process backend)", goalThawP99MS)
	v, r, ok := figs(rs, "freeze", figThawProcessP50, figThawProcessP99)
	if !ok {
		return notMeasured(goal, "freeze")
	}
	measured := fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", v[0], v[1])
	if d, ok := r.Figures[figThawDockerP99]; ok {
		measured += fmt.Sprintf(" (docker p99 %.2f ms)", d)
	}
	why := "the first request after a freeze, through the gateway: the record read, the sandbox's lock, the freezer's thaw, " +
		"the mark cleared, the record activated, then the request proxied"
	return []string{goal, measured, msVerdict(v[1], goalThawP99MS), why, runLabel(r)}
}

func goalCheckpoint(rs map[string]Result) []string {
	goal := fmt.Sprintf("checkpoint of a 100 MB / 1,000-file workspace < %g ms where copy-on-write exists", goalCheckpointMS)
	v, r, ok := figs(rs, "checkpoint", figCheckpointReflinkP50)
	if !ok {
		return notMeasured(goal, "checkpoint")
	}
	measured := fmt.Sprintf("reflink (XFS) p50 %.2f ms", v[0])
	if c, ok := r.Figures[figCheckpointCopyP50]; ok {
		measured += fmt.Sprintf("; copy (ext4, no copy-on-write) p50 %.2f ms", c)
	}
	why := "the first checkpoint of a fresh workspace: every file cloned (FICLONE), its metadata written, the tree renamed into place"
	return []string{goal, measured, msVerdict(v[0], goalCheckpointMS), why, runLabel(r)}
}
