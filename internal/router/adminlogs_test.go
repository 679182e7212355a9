package router

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestCommandTextsFill: a "command ended" line gets its text back from
// the record of the same seq and id, read once and again only for a newer
// line; other lines, lines of an earlier server and lines after a failed
// read pass as they are.
func TestCommandTextsFill(t *testing.T) {
	t.Parallel()
	ring := []sandboxspec.CommandRecord{{Seq: 1, CommandID: "a", Command: `echo "hi" <x>`}, {Seq: 2, CommandID: "b", Command: "ls"}}
	reads := 0
	var fail error
	texts := commandTexts{read: func(context.Context) (sandboxspec.CommandLog, error) {
		reads++
		return sandboxspec.CommandLog{Records: ring}, fail
	}}
	line := func(seq int, id string) string {
		return `{"time":"t","level":"INFO","msg":"command ended","seq":` + strconv.Itoa(seq) + `,"command_id":"` + id + `","exit_code":0}` + "\n"
	}
	fill := func(in string) string { return string(texts.fill(context.Background(), []byte(in))) }

	for _, tc := range []struct {
		name, in, want string
		reads          int
	}{
		{"not a command line", `{"msg":"sandbox server listening"}` + "\n", "", 0},
		{"the first one reads", line(1, "a"), `echo "hi" <x>`, 1},
		{"a known seq does not read again", line(2, "b"), "ls", 1},
		{"an earlier server's line (id differs)", line(2, "z"), "", 1},
		{"a newer line reads again", line(3, "c"), "pwd", 2},
		{"not JSON", `"msg":"command ended" and more` + "\n", "", 2},
	} {
		if tc.name == "a newer line reads again" {
			ring = append(ring, sandboxspec.CommandRecord{Seq: 3, CommandID: "c", Command: "pwd"})
		}
		got := fill(tc.in)
		if tc.want == "" && got != tc.in {
			t.Errorf("%s: changed to %q", tc.name, got)
		}
		if tc.want != "" {
			var rec sandboxspec.CommandRecord
			if err := json.Unmarshal([]byte(got), &rec); err != nil || rec.Command != tc.want || !strings.HasSuffix(got, "}\n") {
				t.Errorf("%s: %q (%v), want command %q", tc.name, got, err, tc.want)
			}
		}
		if reads != tc.reads {
			t.Errorf("%s: %d reads of the command log, want %d", tc.name, reads, tc.reads)
		}
	}

	// A failed read is not repeated line after line (a frozen server).
	fail = errors.New("frozen")
	texts = commandTexts{read: texts.read}
	reads = 0
	for seq := range 5 {
		if got := fill(line(seq+10, "x")); got != line(seq+10, "x") {
			t.Errorf("after a failed read: %q", got)
		}
	}
	if reads != 1 {
		t.Errorf("%d reads after a failure, want 1", reads)
	}
}
