package sandboxspec

import (
	"slices"
	"testing"
)

func TestStripSecrets(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=/bin", "OPENAI_API_KEY=k", "db_password=p", "GITHUB_TOKEN=t", "MY_SECRET=s",
		"AWS_CREDENTIALS=c", "HOME=/h", "WANTED_KEY=w", "NOEQUALS"}
	got := StripSecrets(env, map[string]bool{"WANTED_KEY": true})
	want := []string{"PATH=/bin", "HOME=/h", "WANTED_KEY=w", "NOEQUALS"}
	if !slices.Equal(got, want) {
		t.Fatalf("StripSecrets = %q, want %q", got, want)
	}
}

func TestActivityRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a    Activity
		want bool
	}{
		{Activity{}, false},
		{Activity{Stalled: 3}, false}, // stopped or stalled commands keep nothing alive
		{Activity{Commands: 1}, true},
		{Activity{Requests: 1}, true},
	} {
		if got := tc.a.Running(); got != tc.want {
			t.Errorf("%+v.Running() = %v, want %v", tc.a, got, tc.want)
		}
	}
}
