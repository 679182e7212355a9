package main

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/jail/earlydrop"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// This binary, as the process backend runs it beside the gateway, is a
// locked-down isolated sandbox: its commands have no capability, bounding
// set included, no way to gain one, the seccomp filter, and the commands'
// process limit. So it is linked as scripts/build.sh links it, starting at
// earlydrop's entry point (which then did the drop, its log says), and so
// is the gateway binary where the lean one is missing, built with cgo as
// `go run ./cmd/gateway` builds it (psx then works through libpsx: its drop
// at package init hung that sandbox init once).
func TestJailedSandboxIsLockedDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, pkg, cgo string
		entry          bool
	}{
		{"lean", ".", "0", false},
		{"lean-entry", ".", "0", true},
		{"lean-cgo", ".", "1", false},
		{"gateway-cgo", "../gateway", "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.entry && runtime.GOARCH != "amd64" {
				t.Skip("the entry point is linux/amd64's")
			}
			jailedIsLockedDown(t, tc.pkg, tc.cgo, tc.entry)
		})
	}
}

func jailedIsLockedDown(t *testing.T, pkg, cgo string, entry bool) {
	dir := t.TempDir()
	bin := filepath.Join(dir, sandboxspec.ServerBinary)
	build := exec.Command("go", "build", "-o", bin, pkg)
	if entry {
		build.Args = append(build.Args[:2], "-ldflags", "-E "+earlydrop.EntrySymbol, "-o", bin, pkg)
	}
	build.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	p, err := process.New(process.Config{Binary: bin, StateDir: filepath.Join(dir, "state")}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	info := backendtest.MustCreate(t, p, backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "lee", "lean"))
	out := backendtest.Exec(t, info, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Max processes)' /proc/self/status /proc/self/limits | tr -s ' \\t' ' '").Output
	for _, want := range []string{"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
		"CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2", "Max processes 512 512 processes"} {
		if !strings.Contains(out, want) {
			t.Errorf("a command of the jailed sandbox lacks %q:\n%s", want, out)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, "state", info.SandboxID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if atEntry := strings.Contains(string(log), "bounding set emptied at entry"); atEntry != entry {
		t.Errorf("dropped at the entry point: %v, want %v; the sandbox's log:\n%s", atEntry, entry, log)
	}
}
