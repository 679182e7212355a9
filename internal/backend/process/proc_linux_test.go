package process

import (
	"os"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	tail := " 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 98765 0 0" // fields 7..24
	for _, tc := range []struct {
		name string
		line string
		want proc
		err  bool
	}{
		{"plain", "42 (gateway) S 1 42 42" + tail, proc{PID: 42, PPID: 1, PGID: 42, Start: "98765"}, false},
		{"name with spaces and parens", "7 (a b) c) R 3 5 5" + tail, proc{PID: 7, PPID: 3, PGID: 5, Start: "98765"}, false},
		{"zombie", "9 (x) Z 1 9 9" + tail, proc{PID: 9, PPID: 1, PGID: 9, Start: "98765", Dead: true}, false},
		{"stopped", "9 (x) T 1 9 9" + tail, proc{PID: 9, PPID: 1, PGID: 9, Start: "98765", Stopped: true}, false},
		{"short", "9 (x) S 1 9", proc{}, true},
		{"no parens", "9 x S 1 9 9" + tail, proc{}, true},
		{"bad pid", "x (y) S 1 9 9" + tail, proc{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStat([]byte(tc.line + "\n"))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseStat = %+v, %v; want %+v, err %v", got, err, tc.want, tc.err)
			}
		})
	}
}

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
