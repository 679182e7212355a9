package statedb

import (
	"reflect"
	"testing"
	"time"
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

// GetWithOptions reads what Get and Options read, each present or not.
func TestGetWithOptions(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		if err := s.PutActive(ctx, rec("0000000000000001", "i1"), time.UnixMilli(10_000)); err != nil {
			t.Fatal(err)
		}
		for _, sid := range []string{"0000000000000001", "0000000000000002"} {
			if _, _, err := s.SetOptions(ctx, sid, []byte(`{"template":"`+sid+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutActive(ctx, rec("0000000000000003", "i3"), time.UnixMilli(10_000)); err != nil {
			t.Fatal(err)
		}
		for _, sid := range []string{"0000000000000001", "0000000000000002", "0000000000000003", "0000000000000004"} {
			wantRec, wantOK, err := s.Get(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			wantOpts, _, err := s.Options(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, opts, err := s.GetWithOptions(ctx, sid)
			if err != nil || ok != wantOK || !reflect.DeepEqual(got, wantRec) || string(opts) != string(wantOpts) || (opts == nil) != (wantOpts == nil) {
				t.Errorf("%s: GetWithOptions = %+v %v %q %v; want %+v %v %q", sid, got, ok, opts, err, wantRec, wantOK, wantOpts)
			}
		}
	})
}
