package sandbox

import "strings"

// secretMarkers are the name fragments that make an inherited variable look
// like a credential; such variables never reach a sandbox shell.
var secretMarkers = []string{"KEY", "SECRET", "TOKEN", "PASS", "CREDENTIAL"}

// KeepEnvVar names the variable through which a launcher lists, comma
// separated, variables it set on purpose (configured sandbox env) that must
// survive stripping even if their names look secret.
const KeepEnvVar = "SANDGATE_KEEP_ENV"

// IsSecretName reports whether an environment variable name looks secret.
func IsSecretName(name string) bool {
	upper := strings.ToUpper(name)
	for _, m := range secretMarkers {
		if strings.Contains(upper, m) {
			return true
		}
	}
	return false
}

// StripSecrets returns env (KEY=VALUE entries) without secret-looking
// variables, except those named in keep.
func StripSecrets(env []string, keep map[string]bool) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if IsSecretName(name) && !keep[name] {
			continue
		}
		out = append(out, kv)
	}
	return out
}
