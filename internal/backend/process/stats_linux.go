package process

import (
	"fmt"
	"os"

	"github.com/sandgate/sandgate/internal/proctree"
)

// treeUsage sums the CPU seconds (user + system), resident bytes and
// processes of the sandbox whose leader is pid (started at start) and its
// live descendants. It follows the tree's children files (proctree.Tree),
// so a sample costs reads in proportion to the sandbox's own processes: a
// scan of all of /proc per sample made the sampler's pass grow with the
// square of the sandboxes on the host (bench density).
func treeUsage(pid int, start string) (float64, int64, int, error) {
	tree, err := proctree.Tree(pid, start)
	if err == nil && len(tree) == 0 {
		err = fmt.Errorf("process %d is gone", pid)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	var ticks uint64
	var pages int64
	for _, p := range tree {
		ticks, pages = ticks+p.CPUTicks, pages+p.RSSPages
	}
	return float64(ticks) / proctree.ClockTicks, pages * int64(os.Getpagesize()), len(tree), nil
}

// cpuOf reads one process's CPU seconds (user + system).
func cpuOf(pid int) (float64, error) {
	p, found, err := proctree.Read(pid)
	if err == nil && !found {
		err = fmt.Errorf("process %d is gone", pid)
	}
	return float64(p.CPUTicks) / proctree.ClockTicks, err
}
