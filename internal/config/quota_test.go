package config

import (
	"io"
	"strings"
	"testing"
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
