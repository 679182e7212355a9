package statedb

import (
	"fmt"
	"net/url"
	"strings"

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
		return redis.NewClusterClient(opts), nil
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
