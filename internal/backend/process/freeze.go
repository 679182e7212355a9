//go:build linux

package process

import (
	"context"

	"github.com/sandgate/sandgate/internal/proctree"
)

// signalFreezer pauses a sandbox that has no freezing cgroup (isolation
// none, or a machine without a cgroup freezer the gateway may use).
const signalFreezer = "SIGSTOP process tree"

// stopTree stops the sandbox whose server is root (live, started at start)
// with SIGSTOP: the server and every descendant, walked again until a walk
// finds no new process (proctree.Stop). In a PID namespace the server is
// the namespace's init (SIGSTOP from the gateway's namespace reaches it)
// and orphans are reparented to it; with isolation none, a process that
// left the tree (daemonised, reparented to the host's init) is not
// reached, as Destroy does not reach it either. Should it fail (ctx
// ended), what it stopped is continued again.
func stopTree(ctx context.Context, root int, start string) error {
	_, err := proctree.Stop(ctx, func() ([]proc, error) { return proctree.Tree(root, start) })
	return err
}

// contTree continues every process of the sandbox's tree (SIGCONT).
func contTree(_ context.Context, root int, start string) error {
	tree, err := proctree.Tree(root, start)
	if err != nil {
		return err
	}
	set := make(proctree.Set, len(tree))
	for _, p := range tree {
		set[p.PID] = p.Start
	}
	return proctree.Continue(set)
}
