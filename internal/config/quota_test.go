package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestThreadDataQuota(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		yaml string
		want int64
	}{
		{name: "default none", want: -1},
		{name: "flag", args: []string{"--thread-data-quota", "512m"}, want: 512 << 20},
		{name: "env", env: map[string]string{"SANDGATE_THREAD_DATA_QUOTA": "1.5g"}, want: 3 << 29},
		{name: "yaml", yaml: "thread_data_quota: 10g\n", want: 10 << 30},
		{name: "zero is none", args: []string{"--thread-data-quota", "0"}, want: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadWith(t, tc.args, tc.env, tc.yaml)
			if err != nil || c.ThreadDataQuota != tc.want {
				t.Fatalf("quota %d, err %v; want %d", c.ThreadDataQuota, err, tc.want)
			}
		})
	}
	if _, _, err := Load([]string{"--thread-data-quota", "plenty"}, envOf(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "thread-data-quota") {
		t.Fatalf("bad quota: error %v does not name the setting", err)
	}
}

// TestMultiUserDefaults: with authentication (several users) an unset
// per-user cap gets its default, 0 given anywhere means no cap; without
// authentication there is none.
func TestMultiUserDefaults(t *testing.T) {
	t.Parallel()
	key := []string{"--auth-api-keys", "alice=" + strings.Repeat("ab", 32)}
	for _, tc := range []struct {
		name                 string
		args                 []string
		env                  map[string]string
		yaml                 string
		wantHeld, wantMaking int
	}{
		{name: "one user: none"},
		{name: "auth: defaults", args: key, wantHeld: MultiUserMaxSandboxesPerUser, wantMaking: MultiUserMaxCreatesPerUser},
		{name: "auth: 0 by flag is no cap", args: append(key, "--max-sandboxes-per-user", "0", "--max-creates-per-user", "0")},
		{name: "auth: 0 by env is no cap", args: key, env: map[string]string{"SANDGATE_MAX_SANDBOXES_PER_USER": "0"}, wantMaking: MultiUserMaxCreatesPerUser},
		{name: "auth: yaml", args: key, yaml: "max_sandboxes_per_user: 2\nmax_creates_per_user: 0\n", wantHeld: 2},
		{name: "one user: set", args: []string{"--max-sandboxes-per-user", "3"}, wantHeld: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadWith(t, tc.args, tc.env, tc.yaml)
			if err != nil {
				t.Fatal(err)
			}
			if c.Pool.MaxSandboxesPerUser != tc.wantHeld || c.Pool.MaxCreatesPerUser != tc.wantMaking {
				t.Fatalf("per user: %d sandboxes, %d creates; want %d, %d",
					c.Pool.MaxSandboxesPerUser, c.Pool.MaxCreatesPerUser, tc.wantHeld, tc.wantMaking)
			}
		})
	}
	if _, _, err := Load([]string{"--max-creates-per-user", "-1"}, envOf(nil), io.Discard); err == nil {
		t.Fatal("a negative cap was accepted")
	}
}

func TestLifetimeSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args           []string
		life, idleBusy time.Duration
	}{
		{nil, 24 * time.Hour, 30 * time.Minute},
		{[]string{"--max-lifetime", "2h", "--busy-idle-after", "5m"}, 2 * time.Hour, 5 * time.Minute},
		{[]string{"--max-lifetime", "0", "--busy-idle-after", "0"}, -1, -1},
	} {
		c, _, err := loadWith(t, tc.args, nil, "")
		if err != nil || c.Pool.MaxLifetime != tc.life || c.Pool.BusyIdleAfter != tc.idleBusy {
			t.Fatalf("%v: max_lifetime %s, busy_idle_after %s, %v", tc.args, c.Pool.MaxLifetime, c.Pool.BusyIdleAfter, err)
		}
	}
}

// An unset drain_delay is 5 s behind a balancer (a non-loopback listener)
// and none on loopback; 0 given anywhere is none.
func TestDrainDelay(t *testing.T) {
	t.Parallel()
	public := []string{"--listen", "0.0.0.0:8080", "--insecure"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{name: "loopback: none"},
		{name: "non-loopback: default", args: public, want: DefaultDrainDelay},
		{name: "non-loopback: 0 by env is none", args: public, env: map[string]string{"SANDGATE_DRAIN_DELAY": "0"}},
		{name: "loopback: set", args: []string{"--drain-delay", "2s"}, want: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadWith(t, tc.args, tc.env, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.EffectiveDrainDelay(); got != tc.want {
				t.Fatalf("drain delay %v, want %v", got, tc.want)
			}
		})
	}
}
