package backend

import (
	"slices"
	"testing"
)

func TestValidateSpec(t *testing.T) {
	t.Parallel()
	const sid = "0123456789abcdef"
	ws := []Mount{{HostPath: "/data/ws", ContainerPath: VirtualWorkspace}}
	for _, tc := range []struct {
		name string
		spec Spec
		ok   bool
	}{
		{"minimal", Spec{SandboxID: sid}, true},
		{"mounts and env", Spec{SandboxID: sid, Mounts: ws, Env: map[string]string{"A": "multi\nline", "B": ""}}, true},
		{"empty id", Spec{}, false},
		{"short id", Spec{SandboxID: "abc"}, false},
		{"upper-case id", Spec{SandboxID: "0123456789ABCDEF"}, false},
		{"id with a slash", Spec{SandboxID: "0123456789abcde/"}, false},
		{"id too long", Spec{SandboxID: sid + "0"}, false},
		{"relative mount", Spec{SandboxID: sid, Mounts: []Mount{{HostPath: "/tmp", ContainerPath: "mnt/x"}}}, false},
		{"unclean mount", Spec{SandboxID: sid, Mounts: []Mount{{HostPath: "/tmp", ContainerPath: "/mnt/../etc"}}}, false},
		{"trailing slash", Spec{SandboxID: sid, Mounts: []Mount{{HostPath: "/tmp", ContainerPath: "/mnt/x/"}}}, false},
		{"empty host path", Spec{SandboxID: sid, Mounts: []Mount{{ContainerPath: "/mnt/x"}}}, false},
		{"env name with =", Spec{SandboxID: sid, Env: map[string]string{"A=B": "c"}}, false},
		{"empty env name", Spec{SandboxID: sid, Env: map[string]string{"": "c"}}, false},
		{"env name with NUL", Spec{SandboxID: sid, Env: map[string]string{"A\x00": "c"}}, false},
		{"env value with NUL", Spec{SandboxID: sid, Env: map[string]string{"A": "c\x00"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := ValidateSpec(tc.spec); (err == nil) != tc.ok {
				t.Errorf("ValidateSpec = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestServerEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		configured map[string]string
		home, keep string
		want       []string
	}{
		{"nothing", nil, "", "", []string{}},
		{"sorted, no extras", map[string]string{"Z": "z", "A": "a=b"}, "", "", []string{"A=a=b", "Z=z"}},
		{"home and keep", map[string]string{"K": "v"}, "/ws", "KEEP", []string{"K=v", "HOME=/ws", "KEEP=K"}},
		{"configured home wins", map[string]string{"HOME": "/h", "A": "1"}, "/ws", "KEEP", []string{"A=1", "HOME=/h", "KEEP=A,HOME"}},
		{"keep with nothing configured", nil, "", "KEEP", []string{"KEEP="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ServerEnv(tc.configured, tc.home, tc.keep); !slices.Equal(got, tc.want) {
				t.Errorf("ServerEnv = %q, want %q", got, tc.want)
			}
		})
	}
}
