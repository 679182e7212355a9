// Command recordsandbox is the real sandbox server (sandbox.Main, in this
// process) behind a recorder, for tests that must see what a sandbox
// receives: the process backend starts it as its process_binary, isolated
// (it is then the jail's init, as the gateway binary would be) or not.
// Every request's headers are written to stderr, the sandbox's log on the
// host, as a line "recordsandbox: {JSON}" (an isolated sandbox can write
// nowhere else the test reads), and each answer carries back the
// secret header (sandboxspec.SecretHeader) the request brought, as a sandbox leaking the gateway's key
// would.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// recordPrefix starts each line of recorded headers in the sandbox's log.
const recordPrefix = "recordsandbox: "

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "recordsandbox:", err)
		os.Exit(1)
	}
}

func run() error {
	// The process backend's contract: "sandbox --listen-fd 3 ...", or, for
	// an isolated sandbox, the jail's init, which hands over that command.
	args := os.Args[1:]
	if len(args) > 0 && args[0] == jail.InitCommand {
		server, err := jail.Setup()
		if err != nil || len(server) == 0 {
			return err // a probe ends here
		}
		args = server
	}
	if len(args) > 0 && args[0] == "sandbox" {
		args = args[1:]
	}
	fd := 0
	var inner []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--listen-fd" && i+1 < len(args) {
			fd, _ = strconv.Atoi(args[i+1])
			i++
			continue
		}
		inner = append(inner, args[i])
	}
	if fd == 0 {
		return fmt.Errorf("no --listen-fd in %q", os.Args)
	}
	outer, err := net.FileListener(os.NewFile(uintptr(fd), "listener"))
	if err != nil {
		return fmt.Errorf("inherited listener: %w", err)
	}
	// The real server on a private loopback port, fed through the recorder.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- sandbox.Main(ctx, append(inner, "--listen", addr)) }()

	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		if k := resp.Request.Header.Get(sandboxspec.SecretHeader); k != "" {
			resp.Header.Set(sandboxspec.SecretHeader, k)
		}
		return nil
	}
	var mu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line, _ := json.Marshal(map[string]any{"path": r.URL.Path, "header": r.Header})
		mu.Lock()
		_, _ = os.Stderr.Write([]byte(recordPrefix + string(line) + "\n"))
		mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(outer) }()
	err = <-done
	_ = srv.Close()
	return err
}
