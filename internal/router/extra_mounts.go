package router

import (
	"context"
	"path"
	"strings"

	"github.com/sandgate/sandgate/internal/api"
)

// DeerFlow's provisioner clients send extra_mounts (host_path,
// container_path, read_only) for the paths its tools expect:
// /mnt/skills/{public,custom,integrations}, /mnt/acp-workspace, lark-cli
// dirs. A client never chooses what the gateway's host mounts: host_path is
// never used. A container path is served when it lies inside a mount the
// operator configured for every sandbox (skills, ACP workspace, extra
// mounts); anything else is ignored with a logged reason. Sandbox mounts
// are fixed per gateway, so a request cannot make a writable mount
// read-only or the reverse; the answer says what each path really is.

// resolveExtraMounts decides each requested mount against the configured
// mount points and logs what it ignores (never the client's host path).
func (rt *Router) resolveExtraMounts(ctx context.Context, sid string, req []api.ExtraMount) []api.MountOutcome {
	if len(req) == 0 {
		return nil
	}
	out := make([]api.MountOutcome, 0, len(req))
	for _, m := range req {
		o := api.MountOutcome{ContainerPath: m.ContainerPath}
		mp, reason := coveringMount(rt.mounts, m.ContainerPath)
		if reason == "" {
			o.Mounted, o.ReadOnly = true, mp.ReadOnly
			if m.ReadOnly && !mp.ReadOnly {
				o.Reason = "served by the configured read-write mount " + mp.Path
			}
		} else {
			o.Reason = reason
			rt.log.WarnContext(ctx, "provisioner extra mount ignored", "sandbox_id", sid,
				"container_path", m.ContainerPath, "reason", reason)
		}
		out = append(out, o)
	}
	return out
}

// coveringMount finds the configured mount point p lies in; reason says why
// there is none.
func coveringMount(mounts []MountPoint, p string) (MountPoint, string) {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return MountPoint{}, "container_path must be an absolute, clean path"
	}
	best := -1
	for i, m := range mounts {
		if (p == m.Path || strings.HasPrefix(p, m.Path+"/") || m.Path == "/") && (best < 0 || len(m.Path) > len(mounts[best].Path)) {
			best = i
		}
	}
	if best < 0 {
		return MountPoint{}, "no configured mount covers this path (host paths are chosen by the gateway's configuration, not by clients)"
	}
	return mounts[best], ""
}
