package statedb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Connect opens a Redis client for one of the URL forms production uses:
//
//	redis://[user:pass@]host:port[/db]          one server
//	rediss://...                                one server over TLS
//	redis://host:port?master_name=M&addr=h2:p2  Sentinel (the hosts are sentinels)
//	redis+cluster://host1:port?addr=host2:port  Cluster (rediss+cluster:// for TLS)
//
// Query parameters set go-redis options (dial_timeout=3s, pool_size=50...).
func Connect(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis_url: %w", err)
	}
	switch {
	case strings.HasSuffix(u.Scheme, "+cluster"):
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		opts, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis_url (cluster): %w", err)
		}
		opts.ClusterStateReloadInterval = clusterStateReloadInterval
		rdb := redis.NewClusterClient(opts)
		rdb.OnNewNode(func(node *redis.Client) { node.AddHook(slotMapReload{rdb}) })
		return rdb, nil
	case u.Query().Has("master_name"):
		opts, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis_url (sentinel): %w", err)
		}
		return redis.NewFailoverClient(opts), nil
	default:
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis_url: %w", err)
		}
		return redis.NewClient(opts), nil
	}
}

// clusterStateReloadInterval bounds how long a Cluster client keeps a slot
// map nothing contradicted. go-redis's default is 60 s and only MOVED/ASK
// reload it sooner: after a failover every command for the dead master's
// slots failed (connection refused) until then, and a map reloaded from a
// node that had not yet seen the promotion stayed wrong another 60 s.
const clusterStateReloadInterval = 5 * time.Second

// slotMapReload, a hook on each node's client, asks the Cluster client to
// reload its slot map whenever a node fails in a way a stale map can
// explain: it cannot be reached or answers late (killed, partitioned,
// replaced by its replica), or says CLUSTERDOWN, TRYAGAIN, MASTERDOWN,
// READONLY, LOADING. On the node, not the Cluster client, so the reload
// starts at the first failed dial rather than after go-redis's retries.
// go-redis coalesces the reloads (one at a time, 200 ms apart): a burst of
// failures costs a few CLUSTER SLOTS, and the first command after the
// promotion goes to the new master.
type slotMapReload struct{ rdb *redis.ClusterClient }

func (h slotMapReload) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if staleMap(err) {
			h.rdb.ReloadState(ctx)
		}
		return conn, err
	}
}

func (h slotMapReload) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if staleMap(err) {
			h.rdb.ReloadState(ctx)
		}
		return err
	}
}

func (h slotMapReload) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if staleMap(cmd.Err()) {
				h.rdb.ReloadState(ctx)
				break
			}
		}
		return err
	}
}

// staleMap reports whether err may come from a slot map that no longer
// matches the cluster: anything but an answer (a nil reply, an error reply
// of the command itself) or a caller that went away.
func staleMap(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true // no answer: refused, reset, timed out
	}
	for _, prefix := range []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "LOADING"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
