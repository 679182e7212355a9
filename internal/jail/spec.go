package jail

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/internal/jail/earlydrop"
)

// SandboxUID and SandboxGID are the ids every sandbox runs as inside its
// user namespace: an ordinary user, never root, mapped to a host id of its
// own (see HostIDs).
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// Mount is one bind mount into the sandbox's root.
type Mount struct {
	// Target is the absolute path inside the sandbox.
	Target string `json:"target"`
	// Source is the host path, bound by the child itself; used only when
	// the parent could not hand over a detached mount (FD 0).
	Source string `json:"source,omitempty"`
	// FD is the child's descriptor of a detached mount tree the parent
	// cloned with open_tree: a path the child could not even traverse as
	// its unprivileged host uid. 0 = none.
	FD       int  `json:"fd,omitempty"`
	ReadOnly bool `json:"read_only,omitempty"`
}

// Spec is what the child builds and runs. The parent sends it as JSON on
// the child's fd 3 once the child sits in its cgroups: reading it to EOF is
// the child's signal to go on.
type Spec struct {
	Mounts []Mount `json:"mounts"`
	Limits Limits  `json:"limits"`
	// MemoryByRlimit: no cgroup holds the sandbox, so RLIMIT_AS bounds it.
	MemoryByRlimit bool `json:"memory_by_rlimit,omitempty"`
	// Dir is the working directory of Args.
	Dir string `json:"dir"`
	// Args is the server's command line (the gateway binary's arguments,
	// run in the same process once the sandbox is set up); Env is its
	// whole environment.
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// Probe builds the sandbox and exits 0 instead of starting the server:
	// the start-up check that this kernel can isolate at all.
	Probe bool `json:"probe,omitempty"`
	// HostNetwork keeps the gateway host's network namespace (egress open):
	// the sandbox reaches what the host reaches, its loopback services too.
	// Otherwise it has a namespace of its own with loopback only.
	HostNetwork bool `json:"host_network,omitempty"`
	// Seccomp is the syscall filter, compiled by the gateway
	// (seccompfilter.Program): the sandbox does not serve without it.
	Seccomp []byte `json:"seccomp"`
	// ClearGroups: the child may and must clear its supplementary groups
	// (a gateway running as root lets it; see mapIDs).
	ClearGroups bool `json:"clear_groups,omitempty"`
	// Files is how many descriptors from fd FirstFile on become the
	// server's fds 3, 4, ...
	Files int `json:"files"`
	// SystemRoot is a directory (an image's rootfs) whose systemTops and
	// hostEtc entries the sandbox sees, read-only, instead of the host's;
	// "" = the host's. Nothing in it is trusted: no symlink under it is
	// followed (bind).
	SystemRoot string `json:"system_root,omitempty"`
	// SystemRootFD is the child's descriptor of a detached clone of
	// SystemRoot (as Mount.FD); 0 = the child opens SystemRoot itself.
	SystemRootFD int `json:"system_root_fd,omitempty"`
	// Layer is a directory of the sandbox's own (created, and made its host
	// uid's, by Command.Start) holding a writable overlay over SystemRoot:
	// the sandbox may change its systemTops (install into /usr), the
	// changes land in Layer and the shared root is never written. "" =
	// SystemRoot read-only. It needs a root gateway (idmapped mounts).
	Layer string `json:"layer,omitempty"`
	// LayerFD is the child's descriptor of a detached clone of Layer.
	LayerFD int `json:"layer_fd,omitempty"`
}

// placedMark follows the spec on its pipe once the parent has placed the
// child (Command.Placed): the child goes no further than its root without.
const placedMark = "placed"

// Child-side descriptor layout.
const (
	specFD = 3
	// FirstFile is the child's first descriptor passed on to the server.
	FirstFile = 4
)

// hostTops are the program and library dirs a sandbox gets of the host's;
// systemTops those it gets of a SystemRoot.
var (
	hostTops   = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
	systemTops = append(slices.Clone(hostTops), "opt")
)

// reservedTops are the sandbox root's own top-level dirs, which no mount may
// shadow (nor, with a SystemRoot, one of systemTops).
var reservedTops = append(slices.Clone(hostTops), "etc", "proc", "dev", "tmp", "sys")

// Validate checks what the child relies on.
func (s Spec) Validate() error {
	var errs []error
	reserved := reservedTops
	if s.SystemRoot != "" {
		reserved = append(slices.Clone(reserved), systemTops[len(hostTops):]...)
	}
	for _, m := range s.Mounts {
		if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target || m.Target == "/" {
			errs = append(errs, fmt.Errorf("mount target %q: want a clean absolute path below /", m.Target))
		} else if top := strings.SplitN(m.Target[1:], "/", 2)[0]; slices.Contains(reserved, top) {
			errs = append(errs, fmt.Errorf("mount target %s: /%s is the sandbox's own", m.Target, top))
		}
		if m.FD == 0 && !path.IsAbs(m.Source) {
			errs = append(errs, fmt.Errorf("mount %s: no source", m.Target))
		}
	}
	if s.SystemRoot != "" && (!path.IsAbs(s.SystemRoot) || path.Clean(s.SystemRoot) != s.SystemRoot) {
		errs = append(errs, errors.New("system root: want a clean absolute path"))
	}
	if s.Layer != "" && (s.SystemRoot == "" || !path.IsAbs(s.Layer) || path.Clean(s.Layer) != s.Layer) {
		errs = append(errs, errors.New("image layer: want a clean absolute path, over a system root"))
	}
	if len(s.Args) == 0 {
		errs = append(errs, errors.New("no server command"))
	}
	if len(s.Seccomp) == 0 {
		errs = append(errs, errors.New("no seccomp filter"))
	}
	for _, kv := range s.Env {
		if !strings.Contains(kv, "=") || strings.ContainsRune(kv, 0) {
			name, _, _ := strings.Cut(kv, "=") // never the value: it may be a secret
			errs = append(errs, fmt.Errorf("bad environment entry %q", name))
		}
	}
	return errors.Join(errs...)
}

// InitCommand is the subcommand of the gateway (and sandgate-sandbox)
// binary that sets a sandbox up as its PID 1 and serves in it (Setup);
// package earlydrop recognises it at start-up.
const InitCommand = earlydrop.Command

// Command starts a sandbox: Binary's InitCommand in new namespaces, which
// sets the sandbox up and serves Spec.Args in the same process.
type Command struct {
	Binary string
	Spec   Spec
	// Files are handed to the server as its fds 3, 4, ...
	Files []*os.File
	// UID and GID are the host ids the sandbox's user maps to (HostIDs.For).
	UID, GID int
	// IDs, when set, gives UID and GID instead, called once the child is
	// started (before, with an image layer), and before its id maps: what
	// it does (HostIDs.For's synced write, files owned by those ids) then
	// overlaps the child's exec, which waits unmapped for its maps.
	IDs func() (uid, gid int, err error)
	// Output receives the child's stdout and stderr.
	Output *os.File
	// Placed runs once the child exists, in a goroutine of its own beside
	// IDs and the spec's hand-over, while the child starts and builds its
	// root, which it does not leave (nor start the server, nor anything
	// else) before Placed returned: the place to put it in its cgroups. An
	// error kills the child.
	Placed func(pid int) error
}
