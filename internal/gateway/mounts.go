package gateway

import (
	"path"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/router"
)

// mountPoints lists the paths every sandbox of this configuration has
// mounted beyond the thread's user data, for resolving DeerFlow's
// extra_mounts. The remote backend's provisioner decides its own mounts, so
// it has none here.
func mountPoints(cfg config.Config) []router.MountPoint {
	if cfg.Backend == "remote" {
		return nil
	}
	m := cfg.Pool.Mounts
	var out []router.MountPoint
	k := cfg.KubernetesConfig()
	if m.SkillsDir != "" || cfg.Backend == "kubernetes" && (k.SkillsPVC != "" || k.SkillsHostPath != "") {
		out = append(out, router.MountPoint{Path: backend.VirtualSkills, ReadOnly: true})
	}
	if m.ACPWorkspace != "" {
		out = append(out, router.MountPoint{Path: backend.VirtualACPWorkspace, ReadOnly: true})
	}
	for _, e := range m.Extra {
		out = append(out, router.MountPoint{Path: path.Clean(e.ContainerPath), ReadOnly: e.ReadOnly})
	}
	return out
}
