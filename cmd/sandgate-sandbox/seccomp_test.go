package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/jail/seccompfilter"
)

// The gateway compiles the seccomp filter and hands it over in the spec:
// a sandbox without it, or with one that is malformed, refused by the
// kernel or weaker than the policy, fails closed. It never gets past its
// lock-down, where it would start the server (a probe exits 0 there).
func TestSandboxRefusesABadSeccompFilter(t *testing.T) {
	t.Parallel()
	good, err := seccompfilter.Program()
	if err != nil {
		t.Fatal(err)
	}
	insn := func(code uint16, k uint32) []byte {
		b := binary.NativeEndian.AppendUint16(nil, code)
		return binary.NativeEndian.AppendUint32(append(b, 0, 0), k)
	}
	const bpfRetK, seccompRetAllow = 0x06, 0x7fff0000
	bin := filepath.Join(t.TempDir(), "sandgate-sandbox")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		program []byte
		want    string // in the sandbox's output; "" = locked down, exit 0
	}{
		{"compiled", good, ""},
		{"truncated", good[:len(good)-3], "no valid filter program"},
		{"allow all", insn(bpfRetK, seccompRetAllow), "lets unshare through"},
		{"refused by the kernel", insn(0xffff, 0), "load filter"},
		{"tampered", tamper(good), "lets unshare through"},
		// The policy as go-seccomp-bpf compiles it, which lets another
		// ABI through.
		{"no ABI guard", unguarded(t), "lets ia32 unshare through"},
	} {
		if tc.name == "no ABI guard" && runtime.GOARCH != "amd64" {
			continue // only x86_64 has the ia32 ABI
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := probeWith(t, bin, tc.program)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("probe: %v\n%s", err, out)
			case tc.want != "" && err == nil:
				t.Fatalf("the sandbox locked down with a bad filter:\n%s", out)
			case tc.want != "" && !strings.Contains(out, tc.want):
				t.Fatalf("probe failed, but not on %q:\n%s", tc.want, out)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		if out, err := probeWith(t, bin, nil); err == nil || !strings.Contains(out+err.Error(), "no seccomp filter") {
			t.Fatalf("a sandbox without a filter: %v\n%s", err, out)
		}
	})
}

// unguarded is the sandbox's policy without the guard Program puts before
// it (seccompfilter's guard).
func unguarded(t *testing.T) []byte {
	t.Helper()
	policy, err := seccompfilter.Policy()
	if err != nil {
		t.Fatal(err)
	}
	insts, err := policy.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = binary.NativeEndian.AppendUint32(append(out, in.Jt, in.Jf), in.K)
	}
	return out
}

// tamper turns every EPERM the filter returns into "allow": the program
// stays valid, and denies nothing it should.
func tamper(program []byte) []byte {
	out := bytes.Clone(program)
	const bpfRetK, retErrnoEPERM, retAllow = 0x06, 0x00050001, 0x7fff0000
	for i := 0; i+8 <= len(out); i += 8 {
		if binary.NativeEndian.Uint16(out[i:]) == bpfRetK && binary.NativeEndian.Uint32(out[i+4:]) == retErrnoEPERM {
			binary.NativeEndian.PutUint32(out[i+4:], retAllow)
		}
	}
	return out
}

// probeWith runs the binary's jail as a probe with program as its filter
// and returns its output.
func probeWith(t *testing.T, bin string, program []byte) (string, error) {
	t.Helper()
	dir := t.TempDir()
	uid, gid, err := jail.NewHostIDs(t.TempDir()).For("seccomp-" + strings.ReplaceAll(t.Name(), "/", "-"))
	if err != nil {
		t.Fatal(err)
	}
	if err := jail.Own(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	c := jail.Command{
		Binary: bin,
		Spec: jail.Spec{
			Mounts:         []jail.Mount{{Target: "/mnt/user-data/workspace", Source: dir}},
			Dir:            "/",
			Args:           []string{"probe"},
			Probe:          true,
			MemoryByRlimit: true,
			Seccomp:        program,
		},
		UID: uid, GID: gid, Output: log,
	}
	cmd, err := c.Start()
	if err != nil {
		return "", err
	}
	err = cmd.Wait()
	out, _ := os.ReadFile(log.Name())
	return string(out), err
}
