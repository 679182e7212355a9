package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is a binary's build, stamped with -ldflags -X by make build and
// the image build, else read from the Go build info.
type Version struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Go       string `json:"go"`
}

// BuildVersion fills what -X left unset from the build info: the module
// version (go install m@v) and the VCS revision (a build in a checkout).
func BuildVersion(version, revision string) Version {
	v := Version{Version: version, Revision: revision, Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v.Version = info.Main.Version
		}
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Revision == "" {
					v.Revision = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && revision == "" && v.Revision != "" {
			v.Revision += "-dirty"
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

// String is the line `gateway --version` prints.
func (v Version) String() string {
	s := "gateway " + v.Version
	if v.Revision != "" {
		s += " (revision " + v.Revision + ")"
	}
	return s + " " + v.Go
}

func runVersion(env Env, args []string) error {
	var c common
	fs := newFlags(env, "version", "version [-o json]", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version takes no arguments (got %q)", pos[0])
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, env.Version)
	}
	_, err = fmt.Fprintln(env.Stdout, env.Version.String())
	return err
}
