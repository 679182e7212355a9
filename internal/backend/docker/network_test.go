package docker

import (
	"slices"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

// gateStub records nothing: containerSpec only needs to know a gate exists.
type gateStub struct{}

func (gateStub) Open(backend.EgressIdentity, string) error             { return nil }
func (gateStub) Reassign(string, backend.EgressIdentity, string) error { return nil }
func (gateStub) Close(string)                                          {}

func TestContainerSpecEgress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode      backend.EgressMode
		gate      bool
		network   string
		bridged   bool // --egress-socket and the proxy environment
		wantLabel string
	}{
		{mode: "", gate: true, network: "none", bridged: true, wantLabel: `{"mode":""}`},
		{mode: backend.EgressProxy, gate: true, network: "none", bridged: true, wantLabel: `{"mode":"proxy","allow":["a.example"]}`},
		{mode: backend.EgressProxy, gate: false, network: "none", wantLabel: `{"mode":"proxy","allow":["a.example"]}`},
		{mode: backend.EgressNone, gate: true, network: "none", wantLabel: `{"mode":"none","allow":["a.example"]}`},
		{mode: backend.EgressOpen, gate: true, network: DefaultOpenNetwork, wantLabel: `{"mode":"open","allow":["a.example"]}`},
	}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			cfg := Config{Image: "i", ContainerPrefix: "p", SocketDir: "/sock"}
			if tc.gate {
				cfg.Egress = gateStub{}
			}
			spec := backend.Spec{SandboxID: "0123456789abcdef", Egress: backend.Egress{Mode: tc.mode}}
			if tc.mode != "" {
				spec.Egress.Allow = []string{"a.example"}
			}
			cs, _ := specFor(t, cfg, spec, "/gateway")
			if string(cs.Host.NetworkMode) != tc.network || len(cs.Host.PortBindings) != 0 {
				t.Errorf("network %q ports %v, want %q and none", cs.Host.NetworkMode, cs.Host.PortBindings, tc.network)
			}
			bridged := slices.Contains(cs.Config.Cmd, "--egress-socket")
			proxyEnv := slices.Contains(cs.Config.Env, "HTTPS_PROXY=http://127.0.0.1:3128")
			if bridged != tc.bridged || proxyEnv != tc.bridged {
				t.Errorf("bridge %v proxy env %v, want %v (cmd %q env %q)", bridged, proxyEnv, tc.bridged, cs.Config.Cmd, cs.Config.Env)
			}
			if got := cs.Config.Labels[labelEgress]; got != tc.wantLabel {
				t.Errorf("egress label %s, want %s", got, tc.wantLabel)
			}
		})
	}
}
