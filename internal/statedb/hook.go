package statedb

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// OnError calls onError for every Redis command or pipeline of rdb that
// fails (for the Redis error metric). A nil reply is an answer, not an error;
// NOSCRIPT is how go-redis learns to load a script, which it then does; a
// context cancelled by a client that went away says nothing about Redis; and
// the connection handshake's optional commands (HELLO, CLIENT SETINFO,
// CLIENT MAINT_NOTIFICATIONS) fail harmlessly on older servers.
func OnError(rdb redis.UniversalClient, onError func()) {
	rdb.AddHook(errorHook{onError})
}

type errorHook struct{ onError func() }

func (h errorHook) DialHook(next redis.DialHook) redis.DialHook { return next } // a failed dial fails its command

func (h errorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if failed(cmd, err) {
			h.onError()
		}
		return err
	}
}

func (h errorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		for _, cmd := range cmds {
			if failed(cmd, cmd.Err()) {
				h.onError()
				break
			}
		}
		return err
	}
}

// failed reports whether cmd's err means Redis failed.
func failed(cmd redis.Cmder, err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) || redis.HasErrorPrefix(err, "NOSCRIPT") {
		return false
	}
	switch cmd.Name() {
	case "hello", "client":
		return false
	}
	return true
}
