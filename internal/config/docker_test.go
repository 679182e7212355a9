package config

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend/docker"
)

func TestDockerDefaults(t *testing.T) {
	t.Parallel()
	c, _, err := Load(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Docker
	if d.Image != "sandgate-sandbox:latest" || d.ContainerPrefix != "sandgate-sandbox" || d.Port != 8080 ||
		d.Memory != 2<<30 || d.NanoCPUs != 2e9 || d.PidsLimit != 1024 || d.PullPolicy != docker.PullIfNotPresent ||
		d.SeccompUnconfined || d.Network != "" || d.User != "" || len(d.CapAdd) != 0 || d.DiskLimit != 0 {
		t.Fatalf("docker defaults: %+v", d)
	}
}

func TestDockerSettingsUnderEveryName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		yaml  string
		check func(docker.Config) bool
	}{
		{name: "flags", args: []string{"--image", "img:2", "--container-prefix", "sg", "--port", "9000", "--docker-memory", "512m", "--docker-disk-limit", "10g",
			"--docker-cpus", "0.5", "--docker-pids-limit", "64", "--docker-seccomp-unconfined", "--docker-cap-add", "CHOWN, SETUID",
			"--docker-user", "image", "--docker-pull-policy", "never", "--docker-network", "sandnet", "--docker-host", "tcp://h:2375"},
			check: func(d docker.Config) bool {
				return d.Image == "img:2" && d.ContainerPrefix == "sg" && d.Port == 9000 && d.Memory == 512<<20 && d.DiskLimit == 10<<30 && d.NanoCPUs == 5e8 &&
					d.PidsLimit == 64 && d.SeccompUnconfined && slices.Equal(d.CapAdd, []string{"CHOWN", "SETUID"}) &&
					d.User == docker.UserImage && d.PullPolicy == "never" && d.Network == "sandnet" && d.Host == "tcp://h:2375"
			}},
		{name: "env, zero is no limit", env: map[string]string{"SANDGATE_DOCKER_MEMORY": "0", "SANDGATE_DOCKER_CPUS": "0",
			"SANDGATE_DOCKER_PIDS_LIMIT": "0", "SANDGATE_IMAGE": "x:y", "SANDGATE_DOCKER_DISK_LIMIT": "0"},
			check: func(d docker.Config) bool {
				return d.Memory < 0 && d.DiskLimit <= 0 && d.NanoCPUs < 0 && d.PidsLimit < 0 && d.Image == "x:y"
			}},
		{name: "nested docker block", yaml: "docker:\n  image: n:1\n  port: 7000\n  container_prefix: nest\n  network: net1\n  memory: 1.5g\n  disk_limit: 512m\n  cap_add: [NET_BIND_SERVICE, KILL]\n  pull_policy: always\n",
			check: func(d docker.Config) bool {
				return d.Image == "n:1" && d.Port == 7000 && d.ContainerPrefix == "nest" && d.Network == "net1" &&
					d.Memory == 3<<29 && d.DiskLimit == 512<<20 && slices.Equal(d.CapAdd, []string{"NET_BIND_SERVICE", "KILL"}) && d.PullPolicy == "always"
			}},
		{name: "DeerFlow sandbox keys", yaml: "sandbox:\n  image: enterprise/all-in-one-sandbox:latest\n  port: 8080\n  container_prefix: deer-flow-sandbox\n",
			check: func(d docker.Config) bool {
				return d.Image == "enterprise/all-in-one-sandbox:latest" && d.Port == 8080 && d.ContainerPrefix == "deer-flow-sandbox"
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, warnings, err := loadWith(t, tc.args, tc.env, tc.yaml)
			if err != nil || len(warnings) != 0 {
				t.Fatalf("%v %v", err, warnings)
			}
			if !tc.check(c.Docker) {
				t.Fatalf("docker config: %+v", c.Docker)
			}
		})
	}
}

func TestDockerValidationNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"--docker-memory", "lots"}, "docker-memory"},
		{[]string{"--docker-disk-limit", "big"}, "docker-disk-limit"},
		{[]string{"--docker-cpus", "-1"}, "docker-cpus"},
		{[]string{"--docker-pids-limit", "x"}, "docker-pids-limit"},
		{[]string{"--port", "http"}, "port"},
		{[]string{"--port", "99999"}, "port"},
		{[]string{"--docker-pull-policy", "sometimes"}, "docker_pull_policy"},
		{[]string{"--container-prefix", "bad/prefix"}, "container_prefix"},
		{[]string{"--image", ""}, "image"},
		{[]string{"--docker-cap-add", "NET ADMIN"}, "docker_cap_add"},
	} {
		_, _, err := Load(c.args, envOf(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v: error %v does not name %s", c.args, err, c.field)
		}
	}
}

func TestSizeAndCPUValuesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"512m", "2g", "1.5GiB", "300000", "0"} {
		var v offBytes
		if err := v.Set(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		var back offBytes
		if err := back.Set(v.String()); err != nil || back != v {
			t.Errorf("%s -> %s -> %d, want %d (%v)", s, v.String(), back, v, err)
		}
	}
	for _, s := range []string{"0.5", "2", "0.25", "0"} {
		var v offCPUs
		if err := v.Set(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if v.String() != s {
			t.Errorf("cpus %s -> %s", s, v.String())
		}
	}
}
