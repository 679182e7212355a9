//go:build unix

package usage

import (
	"io/fs"
	"syscall"
)

// allocated is the space info's file takes on disk, its identity and its
// link count.
func allocated(info fs.FileInfo) (int64, fileID, uint64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return info.Size(), fileID{}, 1
	}
	return int64(st.Blocks) * 512, fileID{uint64(st.Dev), uint64(st.Ino)}, uint64(st.Nlink)
}
