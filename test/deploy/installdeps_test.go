package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallDepsSaysWhatItInstalls runs scripts/install-deps.sh (make
// test's first step) with a fake apt-get and sudo first on PATH: the
// package list, and that apt-get runs (as sudo when not root), must be
// printed before apt-get is called (issue 40, point 13: make test ran sudo
// apt-get install of 13 packages without saying so first).
func TestInstallDepsSaysWhatItInstalls(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	// Each fake writes a marker into the same stream as the script's own
	// output, so the order is what a person at the terminal sees.
	for name, body := range map[string]string{
		"apt-get": "#!/bin/sh\necho \"APT-GET $*\" >&2\n",
		"sudo":    "#!/bin/sh\necho \"SUDO\" >&2\nexec \"$@\"\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", repoPath("scripts", "install-deps.sh"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "CI=true",
		"INSTALL_DEPS_WANT=sandgate-no-such-tool-1:pkg-one bash:bash sandgate-no-such-tool-2:pkg-two")
	cmd.Stdin = nil // not a terminal: no question
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install-deps.sh: %v\n%s", err, out)
	}
	text := string(out)
	announce := strings.Index(text, "make deps: the tests need 2 Debian package(s)")
	apt := strings.Index(text, "APT-GET")
	if announce < 0 || apt < 0 || announce > apt {
		t.Fatalf("the list is not announced before apt-get runs:\n%s", text)
	}
	said := text[announce:apt]
	for _, want := range []string{"  pkg-one\n", "  pkg-two\n", "apt-get install"} {
		if !strings.Contains(said, want) {
			t.Errorf("the announcement lacks %q:\n%s", want, said)
		}
	}
	if strings.Contains(said, "bash\n") {
		t.Errorf("announced a package that is present:\n%s", said)
	}
	if os.Getuid() != 0 && !strings.Contains(said, "'sudo apt-get") {
		t.Errorf("not root, and the announcement does not say sudo:\n%s", said)
	}
	if !strings.Contains(text, "APT-GET install -y -qq --no-install-recommends pkg-one pkg-two") {
		t.Errorf("apt-get was not asked for exactly the missing packages:\n%s", text)
	}
}
