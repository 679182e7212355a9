package process

import (
	"fmt"
	"os"

	"github.com/sandgate/sandgate/internal/proctree"
)

// usageOf reads a process's CPU seconds (user + system) and resident bytes.
func usageOf(pid int) (float64, int64, error) {
	p, found, err := proctree.Read(pid)
	if err == nil && !found {
		err = fmt.Errorf("process %d is gone", pid)
	}
	if err != nil {
		return 0, 0, err
	}
	return float64(p.CPUTicks) / proctree.ClockTicks, p.RSSPages * int64(os.Getpagesize()), nil
}
