package gateway

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/pool"
)

// startEmbedded serves the embedded Redis-protocol server to this process
// only. It never listens: each client connection is one end of a socket
// pair whose other end miniredis serves, so there is no port or path that
// another local user (or a sandbox) could reach and read capabilities or
// secrets from. A socket pair, not net.Pipe: the kernel buffers both ways,
// so a large pipeline cannot deadlock against miniredis writing replies.
func startEmbedded() (*miniredis.Miniredis, *redis.Client, error) {
	m := miniredis.NewMiniRedis()
	// Dial starts the server without a listener; this first pipe is closed at once.
	c, err := m.Dial()
	if err != nil {
		return nil, nil, fmt.Errorf("embedded redis: %w", err)
	}
	_ = c.Close()
	srv := m.Server()
	rdb := redis.NewClient(&redis.Options{
		Addr: "embedded", // shown in go-redis errors only; never dialled
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			client, server, err := socketPair()
			if err != nil {
				return nil, fmt.Errorf("embedded redis: %w", err)
			}
			srv.ServeConn(server)
			return client, nil
		},
	})
	return m, rdb, nil
}

// adoptPrevious gives a gateway on the embedded server, whose state starts
// empty with each run, the sandboxes its previous run left running before
// it serves: it takes its buckets and runs one reconcile pass, which adopts
// them at once (pool.Config.Solo: no grace), so a laptop's restarted
// gateway lists them and its threads find them again. A failure only
// leaves them to the reconciler's next passes.
func (g *Gateway) adoptPrevious(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.NewBucketLeases(g.pool).Pass(ctx); err != nil {
		g.log.Warn("adopting the previous run's sandboxes: bucket leases", "err", err)
		return
	}
	rep, err := pool.NewReconciler(g.pool).Pass(ctx)
	if err != nil {
		g.log.Warn("adopting the previous run's sandboxes", "err", err)
		return
	}
	if rep.Adopted > 0 {
		g.log.Info("adopted the sandboxes a previous run left running", "adopted", rep.Adopted, "backend", g.cfg.Backend)
	}
}

// socketPair is a connected pair of Unix stream sockets, close-on-exec so
// no sandbox child inherits an end.
func socketPair() (net.Conn, net.Conn, error) {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "embedded-redis")
		conns[i], err = net.FileConn(f) // dups fd
		_ = f.Close()
		if err != nil {
			if i == 1 {
				_ = conns[0].Close()
			} else {
				_ = syscall.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
	}
	return conns[0], conns[1], nil
}
