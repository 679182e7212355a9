package process

import (
	"sync/atomic"
	"syscall"
)

// meterFiles is the most descriptors one held cgroup meter takes
// (jail.UsageFiles: six files).
const meterFiles = 6

// meterShare is the part of the gateway's file limit held meters may
// take: 1/meterShare. The rest is for what every sandbox costs the
// gateway whether sampled or not (its egress listener, its process's
// pidfd, an idle connection to its server: three) and for clients.
const meterShare = 8

// meterBudget bounds the cgroup meters OpenMeter holds open. Each holds
// six descriptors for as long as the sampler measures its sandbox (the
// sandboxes this replica serves), so a few thousand active sandboxes
// would take the gateway past its file limit, and its connections then
// fail (measured: 7.8 descriptors per sandbox at 1,000, bench -suite
// density). Past the budget a meter opens its files for each sample
// (cgroupOpener), which costs several times the CPU (bench -suite sampler)
// but no descriptor between samples; the sampler takes such a sample every
// fifth interval (it says OpensFiles).
type meterBudget struct {
	held atomic.Int64
	max  int64 // 0: none held
}

// take reserves one meter's files; false past the budget.
func (b *meterBudget) take() bool {
	if b.held.Add(1) > b.max {
		b.held.Add(-1)
		return false
	}
	return true
}

// give returns what take reserved.
func (b *meterBudget) give() { b.held.Add(-1) }

// heldMetersFor is the budget for a file limit, in meters.
func heldMetersFor(limit uint64) int64 { return int64(limit / meterShare / meterFiles) }

// fileLimit is the process's soft RLIMIT_NOFILE (Go raises it to the hard
// limit at start); 1024 if it cannot be read.
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 1024
	}
	return lim.Cur
}
