package sandbox

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Mapping maps a virtual path seen by the agent to a host directory.
type Mapping struct {
	Virtual  string
	Host     string
	ReadOnly bool
}

// Config of the sandbox server. The zero value serves on 127.0.0.1:8080 in
// container mode (no path mapping).
type Config struct {
	Listen   string // default 127.0.0.1:8080; containers pass 0.0.0.0:8080
	ListenFD int    // >0: serve on this inherited listening socket instead
	Mappings []Mapping
	Home     string // virtual home/workspace dir reported and used as default cwd
}

// Main parses the `gateway sandbox` arguments and serves until ctx ends.
// TEMPORARY STUB: only GET /v1/sandbox; the full server replaces it.
func Main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	var cfg Config
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.IntVar(&cfg.ListenFD, "listen-fd", 0, "inherited listening socket fd")
	fs.StringVar(&cfg.Home, "home", "", "home dir")
	var maps, mapsRO multiFlag
	fs.Var(&maps, "map", "VIRTUAL=HOST read-write mapping")
	fs.Var(&mapsRO, "map-ro", "VIRTUAL=HOST read-only mapping")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ln net.Listener
	var err error
	if cfg.ListenFD > 0 {
		ln, err = net.FileListener(os.NewFile(uintptr(cfg.ListenFD), "listener"))
	} else {
		ln, err = net.Listen("tcp", cfg.Listen)
	}
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandbox", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"success":true,"message":"","data":{"home_dir":%q}}`, cfg.Home)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
