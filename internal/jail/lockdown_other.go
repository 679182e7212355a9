//go:build !linux

package jail

import "errors"

// lockDown needs Linux's Landlock, seccomp and capabilities.
func lockDown(Limits, bool, []string) (Report, error) {
	return Report{}, errors.New("jail: locking a sandbox down needs Linux")
}
