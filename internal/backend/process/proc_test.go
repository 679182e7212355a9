package process

import (
	"os"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"

	"github.com/sandgate/sandgate/internal/identity"
)

func TestParseIncarnation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		pid   int
		start string
		ok    bool
	}{
		{"1234-5678", 1234, "5678", true},
		{incarnation(99, "1700000000"), 99, "1700000000", true},
		{"", 0, "", false},
		{"1234", 0, "", false},
		{"1234-", 0, "", false},
		{"abc-5", 0, "", false},
		{"1-5", 0, "", false}, // never pid 1
		{"-5-5", 0, "", false},
	} {
		pid, start, err := parseIncarnation(tc.in)
		if (err == nil) != tc.ok || pid != tc.pid || start != tc.start {
			t.Errorf("parseIncarnation(%q) = %d, %q, %v", tc.in, pid, start, err)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	notExec := t.TempDir() + "/plain"
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		// The default binary is this test binary, which cannot be a jail's init.
		{"defaults", Config{StateDir: t.TempDir(), Isolation: IsolationNone}, true},
		{"isolated", Config{StateDir: t.TempDir(), Binary: testutil.GatewayBinary(t)}, true},
		{"unknown isolation", Config{StateDir: t.TempDir(), Isolation: "chroot"}, false},
		{"no state dir", Config{}, false},
		{"negative timeout", Config{StateDir: t.TempDir(), ReadyTimeout: -time.Second}, false},
		{"missing binary", Config{StateDir: t.TempDir(), Binary: "/nonexistent/gateway"}, false},
		{"binary not executable", Config{StateDir: t.TempDir(), Binary: notExec}, false},
		{"binary is a dir", Config{StateDir: t.TempDir(), Binary: t.TempDir()}, false},
		{"system root without isolation", Config{StateDir: t.TempDir(), Isolation: IsolationNone, SystemRoot: t.TempDir()}, false},
		{"bad system env", Config{StateDir: t.TempDir(), Binary: testutil.GatewayBinary(t), SystemEnv: []string{"PATH"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := New(tc.cfg, nil)
			if (err == nil) != tc.ok {
				t.Fatalf("New = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && (p.cfg.ReadyTimeout != defaultReadyTimeout || p.cfg.Binary == "") {
				t.Errorf("defaults not applied: %+v", p.cfg)
			}
		})
	}
}

func TestLogRotatesWhenLarge(t *testing.T) {
	t.Parallel()
	p, err := New(Config{StateDir: t.TempDir(), Isolation: IsolationNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := identity.SandboxID("rot", "t")
	big := make([]byte, maxLogSize+1)
	if err := os.WriteFile(p.logPath(sid), big, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := p.openLog(sid)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(p.logPath(sid) + ".1"); err != nil || fi.Size() != int64(len(big)) {
		t.Fatalf("old log not kept as .1: %v", err)
	}
	if fi, _ := os.Stat(p.logPath(sid)); fi.Size() > 200 {
		t.Fatalf("new log not fresh: %d bytes", fi.Size())
	}
	// A small log is appended to, not rotated.
	f, _ = p.openLog(sid)
	f.Close()
	if data, _ := os.ReadFile(p.logPath(sid)); len(data) < 2*len("--- sandgate: starting sandbox ") {
		t.Fatalf("small log was not appended to: %q", data)
	}
}
