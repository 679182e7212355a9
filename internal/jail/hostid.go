package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Host ids of sandboxes that get one of their own (a root gateway's
// isolated process sandboxes, every Docker sandbox): from a range no
// account uses, so a sandbox's files on the host belong to nobody real and
// its RLIMIT_NPROC counts its own processes.
const (
	hostIDBase  = 1 << 30
	hostIDRange = 1 << 24
)

// SandboxHostID is a host uid (and gid) derived from the sandbox id:
// 2^30 + fnv32a(sandboxID) mod 2^24. Two ids can share it (a collision
// takes seconds to find), so it serves only where the id is all there is
// (the Docker backend); the process backend allocates (HostIDs).
func SandboxHostID(sandboxID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sandboxID))
	return hostIDBase + int(h.Sum32()%hostIDRange)
}

// allocBase is where HostIDs allocates: the range above SandboxHostID's, so
// an allocated id never meets a derived one (a Docker sandbox's) either.
const allocBase = hostIDBase + hostIDRange

// HostIDs hands out the host uids of a root gateway's sandboxes from a
// table of its own in a gateway-only directory: one id per sandbox id, no
// two live sandboxes the same, and an id freed (Release) comes back only
// after the whole range went round. The table is a file guarded by flock, so
// the gateways sharing a data dir share it; it outlives a gateway restart,
// so a sandbox found running again (Discover) keeps its id, and Claim of a
// known sandbox id returns the id it has.
type HostIDs struct {
	dir string
}

// hostIDTable is the table's file: the next id to try, and the live ones.
type hostIDTable struct {
	Next int            `json:"next"`
	IDs  map[string]int `json:"ids"`
}

// NewHostIDs keeps the table in dir (created 0700).
func NewHostIDs(dir string) *HostIDs { return &HostIDs{dir: dir} }

// For is the host uid and gid SandboxUID maps to for a sandbox: an id of
// its own (Assign) when the gateway runs as root, else the gateway's own (an
// unprivileged user can map only itself).
func (h *HostIDs) For(sandboxID string) (uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid(), nil
	}
	id, err := h.Assign(sandboxID)
	return id, id, err
}

// Probe is the host uid and gid of the start-up probe's throwaway jail: as
// root, the id just above the allocated range, which no sandbox ever gets.
// It needs no table, so a gateway whose disk is full still starts (and
// answers 507 insufficient_storage) instead of failing its probe.
func (h *HostIDs) Probe() (uid, gid int) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid()
	}
	return allocBase + hostIDRange, allocBase + hostIDRange
}

// Assign returns the sandbox's host id: the one it holds, else the next free
// one, which it then holds until Release.
func (h *HostIDs) Assign(sandboxID string) (int, error) {
	var id int
	err := h.update(func(t *hostIDTable) bool {
		if held, ok := t.IDs[sandboxID]; ok {
			id = held
			return false
		}
		used := make(map[int]bool, len(t.IDs))
		for _, v := range t.IDs {
			used[v] = true
		}
		for range hostIDRange {
			cand := allocBase + t.Next%hostIDRange
			t.Next = (t.Next + 1) % hostIDRange
			if !used[cand] {
				id = cand
				t.IDs[sandboxID] = id
				return true
			}
		}
		return false
	})
	if err == nil && id == 0 {
		err = errors.New("every sandbox host id is taken")
	}
	if err != nil {
		return 0, fmt.Errorf("sandbox host id: %w", err)
	}
	return id, nil
}

// Release frees the sandbox's host id; nothing when it holds none.
func (h *HostIDs) Release(sandboxID string) error {
	err := h.update(func(t *hostIDTable) bool {
		_, ok := t.IDs[sandboxID]
		delete(t.IDs, sandboxID)
		return ok
	})
	if err != nil {
		return fmt.Errorf("free sandbox host id: %w", err)
	}
	return nil
}

// update runs change on the table under an exclusive flock of its lock file
// and writes it back (a new file renamed over the old) when change says so.
func (h *HostIDs) update(change func(*hostIDTable) bool) error {
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(h.dir, "host-ids.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close() // and so unlocked
	if err := flock(lock); err != nil {
		return err
	}
	path := filepath.Join(h.dir, "host-ids")
	t := hostIDTable{IDs: map[string]int{}}
	switch data, err := os.ReadFile(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(data, &t); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
		if t.IDs == nil {
			t.IDs = map[string]int{}
		}
	}
	if !change(&t) {
		return nil
	}
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	// A new file, synced, renamed over the old: a crash leaves the old
	// table or the new, never a part (which would hand out live ids).
	tmp := path + ".tmp" // only the lock holder writes it
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
