package sandbox

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	tail := " 1 4321 4321 0 -1 4194560 100 0 0 0 7 3 20 10 20 0 1 0 12345 1000 10"
	for _, tc := range []struct {
		name, line string
		want       procStat
		bad        bool
	}{
		{name: "plain", line: "4321 (sh) S" + tail, want: procStat{state: 'S', pgrp: 4321, cpu: 7 + 3 + 20 + 10}},
		{name: "stopped", line: "4321 (sh) T" + tail, want: procStat{state: 'T', pgrp: 4321, cpu: 40}},
		// A tenant names its process to look like more fields.
		{name: "hostile name", line: "99 (x) R 1 1 1 0 ) ( T) T" + tail, want: procStat{state: 'T', pgrp: 4321, cpu: 40}},
		{name: "name with spaces", line: "99 (a b c) Z" + tail, want: procStat{state: 'Z', pgrp: 4321, cpu: 40}},
		{name: "no name", line: "99 sh S" + tail, bad: true},
		{name: "short", line: "99 (sh) S 1 2 3", bad: true},
		{name: "bad pgrp", line: "99 (sh) S 1 x 1 0 -1 0 0 0 0 0 1 1 1 1", bad: true},
		{name: "bad cpu", line: "99 (sh) S 1 2 1 0 -1 0 0 0 0 0 y 1 1 1", bad: true},
		{name: "long state", line: "99 (sh) SS" + tail, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseProcStat([]byte(tc.line + "\n"))
			if tc.bad {
				if err == nil {
					t.Fatalf("parsed %q as %+v", tc.line, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parse %q = %+v, %v; want %+v", tc.line, got, err, tc.want)
			}
		})
	}
}

// TestScanGroupsFake: members are summed per wanted group, zombies and
// other groups are left out, unparsable entries skipped.
func TestScanGroupsFake(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for pid, line := range map[int]string{
		10: "10 (sh) S 1 10 10 0 -1 0 0 0 0 0 1 2 3 4",
		11: "11 (sleep) T 10 10 10 0 -1 0 0 0 0 0 5 0 0 0",
		12: "12 (dead) Z 10 10 10 0 -1 0 0 0 0 0 100 0 0 0",
		20: "20 (other) R 1 20 20 0 -1 0 0 0 0 0 9 9 9 9",
		21: "garbage",
	} {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := scanGroups(root, map[int]bool{10: true, 30: true})
	if err != nil {
		t.Fatal(err)
	}
	if g := got[10]; g != (groupStat{members: 2, stopped: 1, cpu: 15}) || g.allStopped() {
		t.Fatalf("group 10: %+v", g)
	}
	if g, ok := got[30]; ok || g.allStopped() {
		t.Fatalf("group 30 has no member: %+v", g)
	}
	if _, err := scanGroups(t.TempDir(), map[int]bool{1: true}); err == nil {
		t.Fatal("an empty dir is no procfs")
	}
	// No group wanted: nothing read (not even the dir that is no procfs).
	if got, err := scanGroups(t.TempDir(), nil); got != nil || err != nil {
		t.Fatalf("no group wanted: %v, %v; want nothing read", got, err)
	}
}

// TestScanGroupsRealStopped: a real shell that stopped itself shows as a
// group whose every member is stopped; a sleeping one does not.
func TestScanGroupsRealStopped(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("procfs is Linux's")
	}
	start := func(script string) int {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	stopped, sleeping := start("kill -STOP $$"), start("sleep 300")
	eventually(t, 5*time.Second, "the shell to stop itself", func() bool {
		got, err := scanGroups(procRoot, map[int]bool{stopped: true, sleeping: true})
		if err != nil {
			t.Fatal(err)
		}
		return got[stopped].allStopped() && got[sleeping].members >= 1 && !got[sleeping].allStopped()
	})
}

func TestProgressBusy(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	running := groupStat{members: 2, cpu: 50}
	type look struct {
		at    time.Duration // since t0
		g     groupStat
		wrote time.Duration // since t0
		busy  bool
	}
	for _, tc := range []struct {
		name      string
		idleAfter time.Duration
		looks     []look
	}{
		{"stopped group is never busy", time.Hour, []look{
			{at: 0, g: groupStat{members: 2, stopped: 2, cpu: 50}, busy: false},
		}},
		{"partly stopped group is", time.Hour, []look{
			{at: 0, g: groupStat{members: 2, stopped: 1, cpu: 50}, busy: true},
		}},
		{"first look counts as progress", time.Minute, []look{
			{at: time.Hour, g: running, busy: true},
		}},
		{"no cpu, no output: stalled after idleAfter", time.Minute, []look{
			{at: 0, g: running, busy: true},
			{at: 59 * time.Second, g: running, busy: true},
			{at: 61 * time.Second, g: running, busy: false},
		}},
		{"cpu used: busy again", time.Minute, []look{
			{at: 0, g: running, busy: true},
			{at: 2 * time.Minute, g: running, busy: false},
			{at: 3 * time.Minute, g: groupStat{members: 2, cpu: 51}, busy: true},
			{at: 3*time.Minute + 59*time.Second, g: groupStat{members: 2, cpu: 51}, busy: true},
		}},
		{"output written: busy", time.Minute, []look{
			{at: 0, g: running, busy: true},
			{at: 2 * time.Minute, g: running, wrote: 90 * time.Second, busy: true},
			{at: 3 * time.Minute, g: running, wrote: 90 * time.Second, busy: false},
		}},
		{"group gone, pipe held: stalled after idleAfter", time.Minute, []look{
			{at: 0, busy: true},
			{at: 2 * time.Minute, busy: false},
		}},
		{"idleAfter 0: only a stop ends busy", 0, []look{
			{at: 0, g: running, busy: true},
			{at: 1000 * time.Hour, g: running, busy: true},
			{at: 1001 * time.Hour, g: groupStat{members: 1, stopped: 1}, busy: false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p progress
			for i, l := range tc.looks {
				if got := p.busy(l.g, t0.Add(l.wrote), t0.Add(l.at), tc.idleAfter); got != l.busy {
					t.Fatalf("look %d (%+v): busy = %v", i, l, got)
				}
			}
		})
	}
}

// TestActivityStoppedOrStalled: the attack of issue 33 finding 7 on the
// server itself. A shell that stopped itself (kill -STOP $$) is not busy at
// once; a shell whose child stopped itself (the parent waits forever,
// sleeping) is not busy past busy_idle_after; a command that writes output
// stays busy.
func TestActivityStoppedOrStalled(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("procfs is Linux's")
	}
	probe := func(ts *testServer, q string) sandboxspec.Activity {
		t.Helper()
		r := ts.do(t, http.MethodGet, sandboxspec.ActivityPath+q, nil)
		var a sandboxspec.Activity
		if r.Status != http.StatusOK || json.Unmarshal(r.Data, &a) != nil {
			t.Fatalf("activity: %d %s", r.Status, r.Body)
		}
		return a
	}
	t.Run("self-stopped shell", func(t *testing.T) {
		t.Parallel()
		ts := newHostServer(t)
		shellRun(t, ts, map[string]any{"command": "kill -STOP $$", "async_mode": true})
		eventually(t, 5*time.Second, "the stopped command to count as not busy", func() bool {
			a := probe(ts, "") // the default busy_idle_after (30m) does not matter here
			return a.Commands == 0 && a.Stalled == 1
		})
	})
	t.Run("stopped child", func(t *testing.T) {
		t.Parallel()
		ts := newHostServer(t)
		shellRun(t, ts, map[string]any{"command": "sh -c 'kill -STOP $$'", "async_mode": true})
		if a := probe(ts, "?busy_idle_after=1s"); a.Commands != 1 {
			t.Fatalf("first look: %+v", a)
		}
		eventually(t, 10*time.Second, "the stalled command to count as not busy", func() bool {
			a := probe(ts, "?busy_idle_after=1s")
			return a.Commands == 0 && a.Stalled == 1
		})
	})
	t.Run("writing command", func(t *testing.T) {
		t.Parallel()
		ts := newHostServer(t)
		shellRun(t, ts, map[string]any{"command": "while :; do echo tick; sleep 0.2; done", "async_mode": true})
		for range 8 {
			if a := probe(ts, "?busy_idle_after=1s"); a.Commands != 1 || a.Stalled != 0 {
				t.Fatalf("a command writing output counts as stalled: %+v", a)
			}
			time.Sleep(400 * time.Millisecond)
		}
	})
	t.Run("bad busy_idle_after", func(t *testing.T) {
		t.Parallel()
		ts := newHostServer(t)
		for _, q := range []string{"?busy_idle_after=soon", "?busy_idle_after=-1s"} {
			if r := ts.do(t, http.MethodGet, sandboxspec.ActivityPath+q, nil); r.Status != http.StatusBadRequest || r.Success {
				t.Fatalf("%s: %d %s", q, r.Status, r.Body)
			}
		}
	})
}
