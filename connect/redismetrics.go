package connect

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
)

// CountRedisCommands makes rdb count the commands it sends in the counter
// keyhook.redis.commands of mp (keyhook_redis_commands_total on
// /metrics): each command once, alone or in a pipeline, a script call
// once whatever it runs inside Redis, and the handshake of every
// connection it dials (HELLO, CLIENT SETINFO). What Redis itself counts
// (INFO commandstats) also holds the commands scripts call, which no
// client sees. The hook stays on rdb for its life: count a client once.
func CountRedisCommands(rdb redis.UniversalClient, mp metric.MeterProvider) error {
	c, err := mp.Meter("github.com/keyhook/keyhook/connect").Int64Counter("keyhook.redis.commands",
		metric.WithDescription("Commands sent to Redis, each command of a pipeline and each script call counting once."),
		metric.WithUnit("{command}"))
	if err != nil {
		return fmt.Errorf("connect: redis command counter: %w", err)
	}
	rdb.AddHook(commandCounter{c})
	return nil
}

// commandCounter is the redis.Hook of CountRedisCommands.
type commandCounter struct {
	sent metric.Int64Counter
}

func (commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.sent.Add(ctx, 1)
		return next(ctx, cmd)
	}
}

func (h commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.sent.Add(ctx, int64(len(cmds)))
		return next(ctx, cmds)
	}
}
