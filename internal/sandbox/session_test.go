package sandbox

import (
	"strconv"
	"testing"
)

func TestSessionEvictionPrefersGenerated(t *testing.T) {
	t.Parallel()
	st := sessionStore{m: map[string]*session{}}
	named, _ := st.create("named", "/", nil, 0)
	busy, _ := st.create("", "/", nil, 0)
	busy.running[&command{}] = true
	for range maxSessions * 2 {
		st.create("", "/", nil, 0)
	}
	if len(st.m) > maxSessions {
		t.Fatalf("%d sessions kept, max %d", len(st.m), maxSessions)
	}
	for _, s := range []*session{named, busy} {
		if _, ok := st.get(s.id); !ok {
			t.Fatalf("session %s (generated %v) evicted", s.id, s.generated)
		}
	}
	for i := range maxSessions {
		st.create("n"+strconv.Itoa(i), "/", nil, 0)
	}
	if _, ok := st.get(busy.id); !ok || len(st.m) > maxSessions {
		t.Fatalf("busy session evicted or bound exceeded: %d", len(st.m))
	}
	if _, ok := st.get("named"); ok {
		t.Fatal("oldest idle named session should go once only named ones are left")
	}
}

func TestDefaultSessionIsNeverEvicted(t *testing.T) {
	t.Parallel()
	st := sessionStore{m: map[string]*session{}, defaultID: "dflt"}
	def, _ := st.byID("", "/", nil)
	if def.id != "dflt" {
		t.Fatalf("default session id %q", def.id)
	}
	for i := range maxSessions * 2 {
		st.create("n"+strconv.Itoa(i), "/", nil, 0)
	}
	if again, _ := st.byID("", "/", nil); again != def || len(st.m) > maxSessions {
		t.Fatalf("default session evicted (or bound exceeded: %d)", len(st.m))
	}
}
