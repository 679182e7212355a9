package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sandgate/sandgate/internal/api"
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

func runVersion(ctx context.Context, env Env, args []string) error {
	var c common
	fs := newFlags(env, "version", "version [-o json]   (this binary's build, then the gateway's at --url; --version: this binary's only)", &c)
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version takes no arguments (got %q)", pos[0])
	}
	out := struct {
		Version
		Server *serverVersion `json:"server,omitempty"`
	}{Version: env.Version}
	var serverErr error
	if len(env.Args) > 0 && env.Args[0] == "version" { // the flag forms stay offline
		out.Server, serverErr = askServerVersion(ctx, c)
	}
	if c.output == "json" {
		err = writeJSON(env.Stdout, out)
	} else {
		_, err = fmt.Fprintln(env.Stdout, env.Version.String())
		if err == nil && out.Server != nil {
			_, err = fmt.Fprintln(env.Stdout, out.Server.String())
		}
	}
	if serverErr != nil {
		// Not a failure: the binary's own version is the answer offline.
		fmt.Fprintf(env.Stderr, "gateway: server at %s: %s\n", c.url, serverErr)
	}
	return err
}

// serverVersion is the build a gateway answers on /healthz.
type serverVersion struct {
	URL      string `json:"url"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
}

func (v serverVersion) String() string {
	s := "server " + v.URL + ": gateway " + v.Version
	if v.Revision != "" {
		s += " (revision " + v.Revision + ")"
	}
	return s
}

// askServerVersion reads the build of the gateway at --url from /healthz
// (open: no credential needed).
func askServerVersion(ctx context.Context, c common) (*serverVersion, error) {
	cl, err := newClient(c)
	if err != nil {
		return nil, err
	}
	var h api.Health
	if err := cl.call(ctx, "GET", "/healthz", nil, &h); err != nil {
		return nil, err
	}
	if h.Version == "" {
		return nil, fmt.Errorf("it does not tell its version (older than this binary?)")
	}
	return &serverVersion{URL: cl.base.String(), Version: h.Version, Revision: h.Revision}, nil
}
