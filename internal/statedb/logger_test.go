package statedb

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockedBuffer is written by go-redis's goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A line go-redis logs itself (here: a failed dial) is a JSON slog record.
// Not parallel: go-redis's logger is process-wide.
func TestRedisClientLogsThroughSlog(t *testing.T) {
	var out lockedBuffer
	SetLogger(slog.New(slog.NewJSONHandler(&out, nil)))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: every dial fails
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}

	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		detail, _ := rec["detail"].(string)
		if rec["msg"] == "redis client" && rec["level"] == "WARN" && rec["component"] == "go-redis" &&
			strings.Contains(detail, "failed to dial") {
			return
		}
	}
	t.Fatalf("go-redis's dial failure is not in the slog output: %q", out.String())
}
