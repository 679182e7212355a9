package statedb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetLogger sends go-redis's own log lines (dial failures, pool and
// connection trouble), which it otherwise prints as plain text on stderr,
// into the JSON log as warnings. go-redis has one logger per process.
func SetLogger(log *slog.Logger) {
	redis.SetLogger(redisLog{log.With("component", "go-redis")})
}

type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}
