package main

import (
	"slices"
	"testing"
)

func TestReferenceRow(t *testing.T) {
	t.Parallel()
	stats := Result{Columns: statsColumns, Rows: [][]string{
		{"Create, none: spawn", "50", "1", "2", "3", "4"},
		{"Create, isolated: spawn", "50", "5", "6", "7", "8"},
	}}
	for _, tc := range []struct {
		name   string
		r      Result
		prefix string
		want   []string
	}{
		{"first match", stats, "Create, isolated", []string{"Create, isolated: spawn", "50", "5", "6", "7", "8"}},
		{"no match", stats, "Destroy", nil},
		{"missing suite", Result{}, "Create", nil},
		{"other columns", Result{Columns: []string{"x", "y"}, Rows: [][]string{{"Create", "1"}}}, "Create", nil},
	} {
		got := referenceRow(tc.r, tc.prefix)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: referenceRow = %v, want %v", tc.name, got, tc.want)
		}
		if got != nil {
			got[0] = "relabelled"
			if tc.r.Rows[1][0] == "relabelled" {
				t.Errorf("%s: the copy shares the result's row", tc.name)
			}
		}
	}
}
