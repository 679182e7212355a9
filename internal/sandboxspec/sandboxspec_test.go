package sandboxspec

import (
	"slices"
	"strings"
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

// Not parallel: AllocsPerRun refuses to run beside parallel tests.
func TestValidPort(t *testing.T) {
	for _, c := range []struct {
		port string
		want bool
	}{
		{"1", true}, {"80", true}, {"3000", true}, {"65535", true},
		{"", false}, {"0", false}, {"00", false}, {"03000", false}, {"65536", false}, {"99999", false},
		{"100000", false}, {"-1", false}, {"+80", false}, {" 80", false}, {"80 ", false}, {"8o", false},
		{"%33", false}, {"3000/", false}, {"١٢", false},
	} {
		if got := ValidPort(c.port); got != c.want {
			t.Errorf("ValidPort(%q) = %v, want %v", c.port, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ValidPort("65535") }); n != 0 {
		t.Errorf("ValidPort allocates %.0f times", n)
	}
}

func TestPortPath(t *testing.T) {
	t.Parallel()
	if got, want := PortPath("3000")+"/index.html", "/sandgate/port/3000/index.html"; got != want {
		t.Errorf("PortPath = %q, want %q", got, want)
	}
	if strings.HasPrefix(PortPrefix, "/v1/") {
		t.Errorf("PortPrefix %q is under /v1, where the AIO API lives", PortPrefix)
	}
}
