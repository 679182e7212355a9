package identity

import (
	"strings"
	"testing"
)

func TestSandboxIDAndThreads(t *testing.T) {
	t.Parallel()
	// Known answers from Python: hashlib.sha256(f"{user}:{thread}".encode()).hexdigest()[:16]
	for _, c := range []struct{ user, thread, want string }{
		{"default", "thread-1", "fe0dc8182dec7b77"},
		{"alice", "t2", "9cae8133b9f950f9"},
	} {
		if got := SandboxID(c.user, c.thread); got != c.want || !ValidSandboxID(got) {
			t.Errorf("SandboxID(%q, %q) = %q, want %q", c.user, c.thread, got, c.want)
		}
	}
	cases := []struct {
		thread string
		ok     bool
	}{
		{"abc", true}, {"a.b_c:d-e", true}, {string(make([]byte, 128)), false},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"a%2Fb", false},
		{"ü", false}, {"a b", false}, {"x" + string(rune(0)), false},
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	cases = append(cases, struct {
		thread string
		ok     bool
	}{string(long), false}, struct {
		thread string
		ok     bool
	}{string(long[:128]), true})
	for _, c := range cases {
		if got := ValidThread(c.thread) == nil; got != c.ok {
			t.Errorf("ValidThread(%q) = %v, want %v", c.thread, got, c.ok)
		}
	}
}

func FuzzThreadID(f *testing.F) {
	for _, s := range []string{"a", "..", ".", "a/b", "x:y-z_1.2", "ü", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := ValidThread(s) == nil
		safe := len(s) >= 1 && len(s) <= MaxThreadLen && s != "." && s != ".." &&
			strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == ""
		if ok != safe {
			t.Fatalf("ValidThread(%q) = %v, want %v", s, ok, safe)
		}
		if ok && (strings.Contains(s, "/") || strings.Contains(s, "%")) {
			t.Fatalf("path-unsafe id accepted: %q", s)
		}
		if id := SandboxID("u", s); !ValidSandboxID(id) || id != SandboxID("u", s) {
			t.Fatalf("sandbox id %q", id)
		}
	})
}

func TestUserNamesCannotShiftTheIDSeparator(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		user string
		ok   bool
	}{
		{"alice", true}, {"alice@example.com", true}, {"svc.bot-1_x", true},
		{"alice:proj", false}, {":", false}, {"", false}, {"..", false}, {"a/b", false},
	} {
		if got := ValidUser(c.user) == nil; got != c.ok {
			t.Errorf("ValidUser(%q) = %v, want %v", c.user, got, c.ok)
		}
	}
	// The attack the rule closes: user "alice:proj" with thread "1" would
	// hash exactly like user "alice" with thread "proj:1".
	if SandboxID("alice:proj", "1") != SandboxID("alice", "proj:1") {
		t.Fatal("the formula changed; this test no longer shows why ':' is refused in user names")
	}
}
