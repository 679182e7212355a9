package backend

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/internal/identity"
)

// ValidSandboxID accepts exactly what the gateway derives from
// hex(sha256(user:thread))[:16]; every backend names files, containers or
// Pods after it, so nothing else may reach them.
func ValidSandboxID(sid string) error {
	if !identity.ValidSandboxID(sid) {
		return fmt.Errorf("invalid sandbox id %q: want 16 lowercase hex characters", sid)
	}
	return nil
}

// ValidateSpec rejects what no backend can pass on unambiguously: a bad
// sandbox id, a mount whose container path is not clean and absolute or
// whose host path is empty, an environment variable that is not NAME=value.
// Backends with a narrower syntax (flags, env files) check the rest.
func ValidateSpec(spec Spec) error {
	if err := ValidSandboxID(spec.SandboxID); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		if !path.IsAbs(m.ContainerPath) || path.Clean(m.ContainerPath) != m.ContainerPath {
			return fmt.Errorf("invalid mount path %q: want a clean absolute path", m.ContainerPath)
		}
		if m.HostPath == "" {
			return fmt.Errorf("mount %s: empty host path", m.ContainerPath)
		}
	}
	for name, value := range spec.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") || strings.ContainsRune(value, 0) {
			return fmt.Errorf("invalid sandbox environment variable %q", name)
		}
	}
	return nil
}

// ServerEnv is the configured environment as NAME=value entries sorted by
// name, then HOME=home unless configured (home "" = none), then
// keepVar=NAME,... naming every configured variable (keepVar "" = none):
// the sandbox server strips secret-looking variables from its shells except
// those (sandboxspec.KeepEnvVar, which this package cannot import).
func ServerEnv(configured map[string]string, home, keepVar string) []string {
	names := make([]string, 0, len(configured))
	for name := range configured {
		names = append(names, name)
	}
	slices.Sort(names)
	env := make([]string, 0, len(names)+2)
	for _, name := range names {
		env = append(env, name+"="+configured[name])
	}
	if _, set := configured["HOME"]; home != "" && !set {
		env = append(env, "HOME="+home)
	}
	if keepVar != "" {
		env = append(env, keepVar+"="+strings.Join(names, ","))
	}
	return env
}
