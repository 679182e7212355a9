package config

import (
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/pool"
)

// TemplateConfig is one entry of the YAML-only `templates:` list: what a
// create may choose (pool.Template once its image is resolved).
type TemplateConfig struct {
	Name string `yaml:"name"`
	// Image is the container backends' image reference; the process
	// backend imports it from the local Docker engine unless RootFS is set.
	Image string `yaml:"image"`
	// RootFS is the process backend's image: a `docker save` archive, an
	// OCI image layout tarball, or an OCI image layout directory, imported
	// at start-up into {data_dir}/images. Neither set: the host's /usr.
	RootFS string `yaml:"rootfs"`
	// Env is set in its sandboxes over `environment` ($VAR expanded from
	// the gateway's environment, as there).
	Env map[string]string `yaml:"env"`
	// Memory is its sandboxes' memory limit ("1g", "512MiB"; empty = the
	// backend's); MaxMemory the most a create may ask for (empty = Memory).
	Memory    string `yaml:"memory"`
	MaxMemory string `yaml:"max_memory"`
	// Egress replaces the fleet's egress policy for its sandboxes.
	Egress *backend.Egress `yaml:"egress"`
	// Prewarm is how many of its sandboxes the prewarm pool keeps at least.
	Prewarm int `yaml:"prewarm"`
	// IdleTimeout replaces idle_timeout for its sandboxes ("30m"; empty =
	// idle_timeout; "never").
	IdleTimeout string `yaml:"idle_timeout"`
	// FreezeAfter replaces freeze_after for its sandboxes ("2m"; empty =
	// freeze_after; "never").
	FreezeAfter string `yaml:"freeze_after"`
}

// poolTemplate is t as the pool takes it, without a process rootfs (the
// gateway imports that at start-up).
func (t TemplateConfig) poolTemplate(lookupEnv func(string) (string, bool)) (pool.Template, error) {
	out := pool.Template{Name: t.Name, Backend: backend.Template{Name: t.Name, Image: t.Image},
		Egress: t.Egress, Prewarm: t.Prewarm}
	if len(t.Env) > 0 {
		out.Env = resolveEnv(t.Env, lookupEnv)
	}
	for _, s := range []struct {
		field string
		value string
		dst   *int64
	}{{"memory", t.Memory, &out.Backend.Memory}, {"max_memory", t.MaxMemory, &out.MaxMemory}} {
		if s.value == "" {
			continue
		}
		var n offBytes // the sizes of memory and docker_memory
		if err := n.Set(s.value); err != nil || n <= 0 {
			return out, fmt.Errorf("templates: %s: %s: %q is not a size (e.g. 512m, 2g)", t.Name, s.field, s.value)
		}
		*s.dst = int64(n)
	}
	for _, d := range []struct {
		field string
		value string
		dst   *time.Duration
	}{{"idle_timeout", t.IdleTimeout, &out.IdleTimeout}, {"freeze_after", t.FreezeAfter, &out.FreezeAfter}} {
		switch d.value {
		case "":
		case "never":
			*d.dst = -1
		default:
			v, err := parseDuration(d.value)
			if err != nil || v <= 0 {
				return out, fmt.Errorf("templates: %s: %s: %q is not a duration (e.g. 30m) or never", t.Name, d.field, d.value)
			}
			*d.dst = v
		}
	}
	return out, out.Validate()
}

// templateSources are the images the process backend imports, by template
// name: RootFS, else Image (from the Docker engine); templates with
// neither run the host's /usr.
func (c Config) TemplateSources() map[string]TemplateConfig {
	out := map[string]TemplateConfig{}
	for _, t := range c.Templates {
		if t.RootFS != "" || t.Image != "" {
			out[t.Name] = t
		}
	}
	return out
}
