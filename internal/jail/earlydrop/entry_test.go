package earlydrop

import (
	"os"
	"strings"
	"testing"
)

// scripts/build.sh links both binaries to start at entry: the symbol it
// names is EntrySymbol, which the jailed sandbox test links with (and sees
// do the drop: cmd/sandgate-sandbox).
func TestBuildScriptStartsAtEntry(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../../scripts/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "-E "+EntrySymbol+`"`) {
		t.Errorf("scripts/build.sh does not link with -E %s", EntrySymbol)
	}
}
