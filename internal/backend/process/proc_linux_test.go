package process

import (
	"os"
	"strings"
	"testing"
)

func TestReadProcSelf(t *testing.T) {
	t.Parallel()
	self, found, err := readProc(t.Context(), os.Getpid())
	if err != nil || !found || self.Dead || self.PPID != os.Getppid() || self.Start == "" {
		t.Fatalf("readProc(self) = %+v, %v, %v", self, found, err)
	}
	// The test binary's name has no spaces, so plain splitting finds field 22.
	raw, _ := os.ReadFile("/proc/self/stat")
	if f := strings.Fields(string(raw)); len(f) < 22 || f[21] != self.Start {
		t.Errorf("start time %q, field 22 of %q", self.Start, raw)
	}
	if ok, err := live(t.Context(), os.Getpid(), self.Start); !ok || err != nil {
		t.Errorf("live(self) = %v, %v", ok, err)
	}
	if ok, _ := live(t.Context(), os.Getpid(), self.Start+"0"); ok {
		t.Error("live(self) with another start time is true")
	}
}
