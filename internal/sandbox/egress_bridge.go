package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// The sandbox's network namespace (process backend) or network (docker,
// network none) has loopback only. Its one way out is the gateway's egress
// proxy, served on a Unix socket in a directory bound into the sandbox;
// HTTP clients, which speak TCP proxies only, find it on
// 127.0.0.1:{egress port}, where this bridge copies each connection to that
// socket. The socket's directory, not the socket file, is bound, so a
// gateway that restarts and listens again is found again.

// egressDialTimeout bounds reaching the gateway's socket.
const egressDialTimeout = 5 * time.Second

// bridgeEgress listens on 127.0.0.1:port and forwards every connection to
// the Unix socket at socket until ctx ends.
func bridgeEgress(ctx context.Context, port int, socket string, log *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	log.Info("egress proxy bridged", "listen", ln.Addr().String())
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Warn("egress bridge accept", "err", err)
				}
				return
			}
			go forwardEgress(ctx, c, socket, log)
		}
	}()
	return nil
}

func forwardEgress(ctx context.Context, c net.Conn, socket string, log *slog.Logger) {
	defer c.Close()
	d := net.Dialer{Timeout: egressDialTimeout}
	up, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		log.Warn("egress proxy unreachable", "err", err)
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, c)
		if u, ok := up.(*net.UnixConn); ok {
			_ = u.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.CloseWrite()
	}
	wg.Wait()
}
