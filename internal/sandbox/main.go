package sandbox

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Main parses the `gateway sandbox` arguments and serves until ctx ends,
// without tracing (Run with Tracing for it).
//
//	--listen ADDR          listen address (default 127.0.0.1:8080); unix:PATH = a
//	                       Unix socket (made 0666: its directory guards it)
//	--listen-fd N          serve on an inherited listening socket (fd N) instead
//	--recorded-fd N        exit unless a byte arrives on this inherited pipe before
//	                       EOF: the process backend's creator recorded this server
//	--secret-fd N          read the secret every request must carry from this
//	                       inherited pipe (written and closed by the launcher)
//	--secret-file PATH     read the secret from this file and remove it before
//	                       serving; the server refuses to start if it cannot
//	--map VIRTUAL=HOST     read-write path mapping (repeatable); none = container mode
//	--map-ro VIRTUAL=HOST  read-only path mapping (repeatable)
//	--home DIR             virtual home/workspace dir and default cwd
//	--max-output BYTES     cap on returned command output (default 1 MiB)
//	--egress-socket PATH   bridge 127.0.0.1:3128 (--egress-port) to the gateway's egress
//	                       proxy on this Unix socket
//	--umask OCTAL          umask of the server and every command it runs
//	                       (default 077: what a sandbox writes is its own)
//
// On shutdown every running command's process group is killed.
func Main(ctx context.Context, args []string) error { return Run(ctx, args, Tracing{}) }

// Tracing hooks a tracer into the server (package sandboxtrace, in the
// gateway binary). It is not this package's own: it would link the
// OpenTelemetry SDK, gRPC and protobuf into the sandbox's binary
// (cmd/sandgate-sandbox), whose package init alone then cost every sandbox
// start milliseconds. The zero value traces nothing.
type Tracing struct {
	// Log wraps the server's log handler (trace ids on its records).
	Log func(slog.Handler) slog.Handler
	// Start sets tracing up; it returns the wrapper of the server's
	// handler and the flush to run at shutdown.
	Start func(ctx context.Context, log *slog.Logger) (wrap func(http.Handler) http.Handler, flush func(context.Context) error)
}

// Run is Main with t's tracing.
func Run(ctx context.Context, args []string, t Tracing) error {
	fs := flag.NewFlagSet(sandboxspec.ServerCommand, flag.ContinueOnError)
	var cfg Config
	var maps, mapsRO multiFlag
	fs.StringVar(&cfg.Listen, sandboxspec.FlagListen, "127.0.0.1:8080", "address to listen on")
	fs.IntVar(&cfg.ListenFD, sandboxspec.FlagListenFD, 0, "serve on this inherited listening socket fd")
	recordedFD := fs.Int(sandboxspec.FlagRecordedFD, 0, "exit unless the creator confirms on this inherited pipe fd")
	secretFD := fs.Int(sandboxspec.FlagSecretFD, 0, "read the required request secret from this inherited pipe fd")
	secretFile := fs.String(sandboxspec.FlagSecretFile, "", "read the required request secret from this file, then remove it")
	fs.StringVar(&cfg.Home, sandboxspec.FlagHome, "", "virtual home dir (default: /mnt/user-data/workspace if mapped, else $HOME)")
	fs.Int64Var(&cfg.MaxOutput, "max-output", DefaultMaxOutput, "cap on returned command output in bytes")
	fs.Var(&maps, sandboxspec.FlagMap, "VIRTUAL=HOST read-write path mapping (repeatable)")
	fs.Var(&mapsRO, sandboxspec.FlagMapRO, "VIRTUAL=HOST read-only path mapping (repeatable)")
	egressSocket := fs.String(sandboxspec.FlagEgressSocket, "", "bridge the egress port on loopback to the gateway's egress proxy on this Unix socket")
	egressPortFlag := fs.Int("egress-port", sandboxspec.EgressPort, "loopback port of the egress bridge")
	umask := fs.String(sandboxspec.FlagUmask, DefaultUmask, "umask of the server and its commands (octal)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := setUmask(*umask); err != nil {
		return err
	}
	if err := loadSecret(&cfg, *secretFD, *secretFile); err != nil {
		return err
	}
	for _, set := range []struct {
		specs []string
		ro    bool
	}{{maps, false}, {mapsRO, true}} {
		for _, spec := range set.specs {
			m, err := parseMapping(spec, set.ro)
			if err != nil {
				return err
			}
			cfg.Mappings = append(cfg.Mappings, m)
		}
	}
	var handler slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if t.Log != nil {
		handler = t.Log(handler)
	}
	log := slog.New(handler).With("component", "sandbox")
	if *recordedFD > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go awaitRecorded(*recordedFD, cancel, log)
	}
	cfg.Logger = log
	reapOrphans(ctx, log)
	if *egressSocket != "" {
		if err := bridgeEgress(ctx, *egressPortFlag, *egressSocket, log); err != nil {
			return fmt.Errorf("egress bridge: %w", err)
		}
	}
	wrap := func(h http.Handler) http.Handler { return h }
	if t.Start != nil {
		var flush func(context.Context) error
		wrap, flush = t.Start(ctx, log)
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := flush(fctx); err != nil {
				log.Warn("flush traces", "err", err)
			}
		}()
	}
	srv, err := New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	srv.sweepTemps(ctx, log)
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	return serve(ctx, srv, wrap(srv.Handler()), ln, log)
}

// loadSecret reads the server's secret (at most one source) before anything
// is served or run, and makes the process non-dumpable so that commands of
// the same uid cannot read it back out of its memory.
func loadSecret(cfg *Config, fd int, file string) error {
	var err error
	switch {
	case fd > 0 && file != "":
		return errors.New("--secret-fd and --secret-file: give one")
	case fd > 0:
		cfg.Secret, err = readSecretFD(fd)
	case file != "":
		cfg.Secret, err = readSecretFile(file)
	}
	if err != nil {
		return err
	}
	return undumpable()
}

// awaitRecorded reads the creator's confirmation from fd; EOF first means
// the creator died before recording this server anywhere, so nobody could
// ever find, use or stop it: it shuts down (cancel).
func awaitRecorded(fd int, cancel context.CancelFunc, log *slog.Logger) {
	f := os.NewFile(uintptr(fd), "recorded")
	if f == nil {
		log.Error("recorded-fd: invalid descriptor; exiting", "fd", fd)
		cancel()
		return
	}
	defer f.Close()
	var b [1]byte
	if n, _ := f.Read(b[:]); n == 1 {
		return
	}
	log.Warn("creator exited before recording this sandbox; shutting down")
	cancel()
}

// DefaultUmask keeps what a sandbox writes (files, dirs, its commands'
// output) from every other host user, the thread dirs' mode aside.
const DefaultUmask = "077"

// setUmask sets the process umask, which the shells and commands inherit.
func setUmask(octal string) error {
	mask, err := strconv.ParseUint(octal, 8, 32)
	if err != nil || mask > 0o777 {
		return fmt.Errorf("--umask %q: want an octal mode such as 077", octal)
	}
	syscall.Umask(int(mask))
	return nil
}

func parseMapping(spec string, ro bool) (Mapping, error) {
	v, h, ok := strings.Cut(spec, "=")
	if !ok || v == "" || h == "" {
		return Mapping{}, fmt.Errorf("mapping %q: want VIRTUAL=HOST", spec)
	}
	abs, err := filepath.Abs(h)
	if err != nil {
		return Mapping{}, fmt.Errorf("mapping %q: %w", spec, err)
	}
	return Mapping{Virtual: v, Host: abs, ReadOnly: ro}, nil
}

func listen(cfg Config) (net.Listener, error) {
	if cfg.ListenFD > 0 {
		f := os.NewFile(uintptr(cfg.ListenFD), "listener")
		if f == nil {
			return nil, fmt.Errorf("listen-fd %d: invalid descriptor", cfg.ListenFD)
		}
		defer f.Close() // FileListener holds its own dup
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("listen-fd %d: %w", cfg.ListenFD, err)
		}
		return ln, nil
	}
	if path, ok := strings.CutPrefix(cfg.Listen, "unix:"); ok {
		_ = os.Remove(path) // an earlier incarnation's
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		// The gateway's uid is not ours; the socket's directory decides who
		// may reach it.
		if err := os.Chmod(path, 0o666); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("listen: %w", err)
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// serve runs the HTTP server until ctx ends, then kills running commands
// (so their requests complete) and drains.
func serve(ctx context.Context, srv *Server, h http.Handler, ln net.Listener, log *slog.Logger) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute, // above the gateway's idle pool timeout
	}
	mode := "container"
	if srv.pm.Enabled() {
		mode = "host"
	}
	addr := ln.Addr().String()
	if ln.Addr().Network() == "unix" {
		addr = "unix socket" // its path is the host's: not for a log the admin API serves
	}
	log.Info("sandbox server listening", "addr", addr, "mode", mode)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("sandbox server shutting down")
	srv.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
