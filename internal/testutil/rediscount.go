package testutil

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Commands counts the Redis commands a client sends, alone or in
// pipelines, by name (lower case: "hgetall") and by name and first
// argument ("hgetall keyhook:nodes"): a test proves that some work costs
// no command without reading timings.
type Commands struct {
	mu sync.Mutex
	// n is guarded by mu.
	n map[string]int
}

// CountCommands adds a counter of rdb's commands to rdb.
func CountCommands(rdb redis.UniversalClient) *Commands {
	c := &Commands{n: make(map[string]int)}
	rdb.AddHook(c)
	return c
}

// Take returns the counts since the last Take, and starts again from 0.
func (c *Commands) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = make(map[string]int)
	return out
}

func (c *Commands) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		name := strings.ToLower(cmd.Name())
		c.n[name]++
		if args := cmd.Args(); len(args) > 1 {
			if key, ok := args[1].(string); ok {
				c.n[name+" "+key]++
			}
		}
	}
}

// DialHook is redis.Hook's; dials are not commands.
func (c *Commands) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command sent alone.
func (c *Commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts each command of a pipeline.
func (c *Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}
