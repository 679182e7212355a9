package usage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/backend"
)

// Remove deletes a thread's data ({data_dir}/users/{user}/threads/{thread},
// the user-data dir and whatever else is kept per thread) and forgets its
// measurement; removed is false when there was none. user and thread must
// be validated identifiers; the thread's sandbox must be gone first.
func (m *Meter) Remove(ctx context.Context, user, thread string) (bool, error) {
	dir := filepath.Dir(backend.ThreadDir(m.cfg.DataDir, user, thread))
	if err := ctx.Err(); err != nil {
		return false, err
	}
	_, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		err = os.RemoveAll(dir)
	}
	m.mu.Lock()
	delete(m.cache, key{user, thread})
	m.mu.Unlock()
	if err != nil {
		return false, fmt.Errorf("remove thread data: %w", err)
	}
	return true, nil
}
