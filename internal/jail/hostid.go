package jail

import "hash/fnv"

// Host ids of sandboxes that get one of their own (a root gateway's
// isolated process sandboxes, every Docker sandbox): one per sandbox id,
// from a range no account uses, so a sandbox's files on the host belong to
// nobody real and its RLIMIT_NPROC counts its own processes. Two ids
// colliding share a host uid, and nothing else: each sandbox still sees
// only its own namespaces and mounts.
const (
	hostIDBase  = 1 << 30
	hostIDRange = 1 << 24
)

// SandboxHostID is the sandbox's own host uid (and gid):
// 2^30 + fnv32a(sandboxID) mod 2^24, whoever the gateway runs as.
func SandboxHostID(sandboxID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sandboxID))
	return hostIDBase + int(h.Sum32()%hostIDRange)
}
