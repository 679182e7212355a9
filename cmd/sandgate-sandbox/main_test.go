package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary starts every sandbox: a package it links initialises on every
// start, used or not. These must stay out (the gateway's, tracing's, and
// the seccomp compiler's: the gateway compiles the filter).
func TestLinksNothingHeavy(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"go.opentelemetry.io/", "google.golang.org/", "github.com/prometheus/",
			"github.com/sandgate/sandgate/internal/telemetry", "github.com/sandgate/sandgate/internal/backend",
			"github.com/elastic/go-seccomp-bpf", "github.com/sandgate/sandgate/internal/jail/seccompfilter"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("sandgate-sandbox links %s", pkg)
			}
		}
	}
}
