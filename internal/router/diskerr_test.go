package router

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/pool"
)

// A full disk is 507 insufficient_storage wherever it surfaces, never the
// broken-connection 502 (a syscall.Errno is a net.Error), and a budget
// refusal names the limit it hit.
func TestStatusOfDisk(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want string // in the message
	}{
		{"checkpoint ENOSPC", fmt.Errorf("checkpoint workspace: a/b: %w", syscall.ENOSPC), "ENOSPC"},
		{"storage ENOSPC", fmt.Errorf("%w: %w", pool.ErrStorage, syscall.ENOSPC), "ENOSPC"},
		{"EDQUOT", fmt.Errorf("copy: %w", syscall.EDQUOT), "EDQUOT"},
		{"bytes", fmt.Errorf("x: %w", &checkpoint.BudgetError{Limit: checkpoint.LimitUserBytes, Used: 1, Need: 2, Max: 2}), checkpoint.LimitUserBytes},
		{"inodes", &checkpoint.BudgetError{Limit: checkpoint.LimitUserInodes, Used: 1, Need: 2, Max: 2}, checkpoint.LimitUserInodes},
		{"threads", &checkpoint.BudgetError{Limit: checkpoint.LimitUserThreads, Used: 2, Need: 1, Max: 2}, checkpoint.LimitUserThreads},
		{"floor", &checkpoint.BudgetError{Limit: checkpoint.LimitFreeFloor, Used: 1, Need: 2, Max: 2}, checkpoint.LimitFreeFloor},
	} {
		got := statusOf(c.err)
		if got.status != http.StatusInsufficientStorage || got.code != "insufficient_storage" || !strings.Contains(got.message, c.want) {
			t.Errorf("%s: statusOf = %d %s %q, want 507 insufficient_storage naming %s", c.name, got.status, got.code, got.message, c.want)
		}
	}
}
