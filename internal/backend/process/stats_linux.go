package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Linux reports CPU times in USER_HZ, 100 on every architecture Go runs on.
const clockTicks = 100

// usageOf reads a process's CPU seconds (user + system) and resident bytes.
func usageOf(pid int) (float64, int64, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(stat[end+1:])) // field N is index N-3
	if len(f) < 22 {
		return 0, 0, errors.New("short stat")
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	rssPages, err3 := strconv.ParseInt(f[21], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, fmt.Errorf("malformed stat: %w", err)
	}
	return (utime + stime) / clockTicks, rssPages * int64(os.Getpagesize()), nil
}
