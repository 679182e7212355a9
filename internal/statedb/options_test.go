package statedb

import (
	"testing"
)

// A thread's create options: stored whole, reported changed only when they
// differ, and read back as written; another thread's are its own.
func TestOptions(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		if _, ok, err := s.Options(ctx, "0123456789abcdef"); ok || err != nil {
			t.Fatalf("before any: ok %v err %v", ok, err)
		}
		for i, step := range []struct {
			data    string
			changed bool
		}{{`{"template":"py"}`, true}, {`{"template":"py"}`, false}, {`{}`, true}} {
			_, changed, err := s.SetOptions(ctx, "0123456789abcdef", []byte(step.data))
			if err != nil || changed != step.changed {
				t.Fatalf("step %d: changed %v err %v, want changed %v", i, changed, err, step.changed)
			}
			got, ok, err := s.Options(ctx, "0123456789abcdef")
			if err != nil || !ok || string(got) != step.data {
				t.Fatalf("step %d: read %q %v %v", i, got, ok, err)
			}
		}
		if _, ok, _ := s.Options(ctx, "fedcba9876543210"); ok {
			t.Fatal("another sandbox id has options")
		}
	})
}
